"""`overload` in Python: the Rust detector (`plugins/overload`) line for line.

- overload: GPU utilisation above `gpu_util_permille` for `gpu_intervals`
  consecutive intervals (default: > 90% for 5).
- memory-pressure: free memory below `memory_free_permille` for
  `memory_intervals` consecutive intervals (default: < 10% for 3).

Severity grows with how far the latest sample is past the threshold.
"""

from tessera_sdk import ConfigError, Detector, Finding, export_detector


class Overload(Detector):
    NAME = "overload"
    VERSION = "0.1.0"
    DESCRIPTION = "sustained GPU overload and memory pressure"
    CONFIG = {"gpu_util_permille": 900, "gpu_intervals": 5, "memory_free_permille": 100, "memory_intervals": 3}

    def __init__(self, config):
        super().__init__(config)
        for key in ("gpu_util_permille", "memory_free_permille"):
            if not 0 <= config[key] <= 65535:
                raise ConfigError(f"invalid configuration: `{key}`: {config[key]} is not a u16")
        for key in ("gpu_intervals", "memory_intervals"):
            if config[key] < 0:
                raise ConfigError(f"invalid configuration: `{key}`: {config[key]} is not a usize")
        if config["gpu_intervals"] == 0 or config["memory_intervals"] == 0:
            raise ValueError("overload: intervals must be at least 1")
        if config["gpu_util_permille"] > 1000 or config["memory_free_permille"] > 1000:
            raise ValueError("overload: thresholds are tenths of a percent (0..=1000)")

    def window(self):
        return max(self.config["gpu_intervals"], self.config["memory_intervals"])

    def detect(self, window):
        c = self.config
        latest = window.latest()
        if latest is None:
            return []
        gpu_t, mem_t = c["gpu_util_permille"], c["memory_free_permille"]
        out = []
        for node, s in latest.samples.items():
            if window.consecutive(node, lambda x: x.gpu_util_permille > gpu_t) >= c["gpu_intervals"]:
                over = s.gpu_util_permille - gpu_t
                room = max(1000 - gpu_t, 1)
                out.append(Finding(
                    node=node,
                    kind="overload",
                    severity=min(500 + 500 * over // room, 1000),
                    message=f"GPU utilisation above {gpu_t}‰ for {c['gpu_intervals']} consecutive intervals "
                    f"(now {s.gpu_util_permille}‰)",
                ))
            if window.consecutive(node, lambda x: x.memory_free_permille < mem_t) >= c["memory_intervals"]:
                short = mem_t - s.memory_free_permille
                out.append(Finding(
                    node=node,
                    kind="memory-pressure",
                    severity=min(500 + 500 * short // max(mem_t, 1), 1000),
                    message=f"free memory below {mem_t}‰ for {c['memory_intervals']} consecutive intervals "
                    f"(now {s.memory_free_permille}‰)",
                ))
        return out


Detection = export_detector(Overload)
