"""OpenAI-compatible HTTP server: `create_app(deploy_config, served_model_name, api_key, ...)`."""
