"""What the runtime holds of stages placed outside its process (Ray actors, processes of the server's own): a proxy per
role over each stage's replicas, and their counters as last reported.

Stages are labelled by role, `qwen3_tts.<stage_id>` where another Talker stage sits beside one; several Talker stages
(one checkpoint per task type) go behind one TalkerSet, routed by the request as in process.
"""

from __future__ import annotations

from typing import Any

from aura_omni.deploy import AURA, TALKER, DeployConfig, Stage
from aura_omni.placement.proxies import AsrProxy, AuraProxy, TtsProxy
from aura_omni.placement.replicas import Replica, ReplicaSet


def stage_label(deploy: DeployConfig, stage: Stage, apart: list[Stage]) -> str:
    """A placed stage's label among the stages placed apart (`apart`)."""
    role = deploy.role_of(stage)
    return role if sum(deploy.role_of(s) == role for s in apart) == 1 else f"{role}.{stage.stage_id}"


def replica_set(label: str, actors: list, infos: list[dict]) -> ReplicaSet:
    """A stage's replicas from their actors and the `StageHost.info()` each reported."""
    suffix = f":{infos[0]['config'].tts_model_type}" if "." in label else ""  # as TalkerSet names its loops
    return ReplicaSet(label, [Replica(i, actor, loops=info["loops"], started=info["started"])
                              for i, (actor, info) in enumerate(zip(actors, infos))], suffix)


class PlacedStages:
    def __init__(self, deploy: DeployConfig, sets: dict[str, ReplicaSet], infos: dict[str, list[dict]]):
        """`sets` and `infos` (per replica) by stage label."""
        self.deploy, self.sets, self.infos = deploy, sets, infos
        self.models: dict[str, Any] = {}  # role -> proxy: what Runtime.models holds for a stage in process
        talkers = []
        for label, replicas in sets.items():
            role, info = label.split(".")[0], infos[label][0]
            if role == AURA:
                self.models[role] = AuraProxy(replicas, info, deploy.stage(AURA))
            elif role == TALKER:
                talkers.append(TtsProxy(replicas, info))
            else:
                self.models[role] = AsrProxy(replicas, info)
        if len(talkers) == 1:
            self.models[TALKER] = talkers[0]
        elif talkers:
            from aura_omni.stages.talker_set import TalkerSet

            self.models[TALKER] = TalkerSet(talkers)

    async def warm_up(self) -> dict[str, float]:
        """Every replica warmed itself before it reported ready (and does again after a restart): the seconds each
        took."""
        return {f"{label}/{i}": info["warm_s"] for label, infos in self.infos.items() for i, info in enumerate(infos)}

    def serve_here(self) -> None:
        """Called on the server's event loop as it starts serving (stage processes: their sockets are read there)."""

    def process_memory(self) -> dict[str, dict]:
        """Per process of the server's own that runs stages (`process_stages`): its memory as last reported."""
        return {}

    def stage_stats(self) -> dict[str, dict]:
        """Per replica and loop (`talker/1`), as last reported."""
        out: dict[str, dict] = {}
        for replicas in self.sets.values():
            out.update(replicas.stage_stats())
        return out

    def stage_latencies(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for replicas in self.sets.values():
            out.update(replicas.stage_latencies())
        return out
