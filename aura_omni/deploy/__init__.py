"""The deploy file: its YAML schema (schema.py), what this build honours of it (refusals.py), and reading it
(loading.py). Importers take names from here: `from aura_omni.deploy import DeployConfig, Stage`."""

from aura_omni.deploy.schema import (
    ASR, AURA, TALKER, CODE2WAV, STAGE_ROLES, PIPELINE_LAYOUTS, DeployConfigError, SamplingParams,
    SubtalkerSamplingParams, ConnectorExtra, Connector, Kernels, Stage, StageOverride, Platform, TurnSettings,
    DuplexSession, DeployConfig,
)
from aura_omni.deploy.refusals import (
    CODEC_NUM_QUANTIZERS, CODEC_ATTENTION_WINDOW, TALKER_MIN_TOKENS, TALKER_STOP_IDS, PLATFORMS, IN_PROCESS,
    REFUSED_EXTRAS, ANY, HONOURED_SAMPLING, NEUTRAL_SAMPLING, MATCHING_SAMPLING, SAMPLING_WHY, refusals,
)
from aura_omni.deploy.loading import (
    parse_deploy_config, load_deploy_config, single_model_config,
)
