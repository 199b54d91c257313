"""A client's request, whatever its transport (HTTP, realtime socket, `Omni`): fields -> `TurnRequest` and Talker
requests, checked before any stage runs, and the OpenAI error vocabulary a refusal is answered in."""
