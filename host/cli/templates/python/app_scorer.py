"""{{name}}: a Tessera placement policy (filter and score), in Python.

`filter` keeps the pod off nodes whose CPU is busier than the configured
limit; `score` prefers the node with the most free GPU share, then the most
free CPU. Units are the contract's: CPU in millicores, GPU share in
thousandths of a GPU, utilisation in tenths of a percent.
"""

from tessera_sdk import ConfigError, Scorer, export_scorer


class Policy(Scorer):
    NAME = "{{name}}"
    VERSION = "0.1.0"
    DESCRIPTION = "most free GPU share, then most free CPU; skips busy nodes"
    FILTER_REASONS = ["CPU-BUSY"]
    # Every field the policy document may set, with its default; anything
    # else is refused at load, naming the field.
    CONFIG = {"max_cpu_util_permille": 900}

    def __init__(self, config):
        super().__init__(config)
        if not 0 <= config["max_cpu_util_permille"] <= 1000:
            raise ConfigError("max_cpu_util_permille: tenths of a percent, 0..=1000")

    def filter(self, pod, node):
        if node.cpu_util_permille > self.config["max_cpu_util_permille"]:
            return "CPU-BUSY"
        return None

    def score(self, pod, node):
        # Higher is better; the host normalises scores across candidates.
        return node.free_gpu_milli * 1_000_000 + node.free.cpu_milli


# The component's export: componentize-py looks for `Scoring` here.
Scoring = export_scorer(Policy)
