"""`binpack` in Python: the Rust plugin (`plugins/binpack`) line for line.

Packs pods onto the most allocated nodes: the score is the weighted mean
over CPU, memory and GPU share of the node's utilisation after placing the
pod, in thousandths. The arithmetic is the Rust plugin's, in f32 step by
step (`tessera_sdk.f32`), so both give the same integer for every node:
the test suite checks they place every pod alike.
"""

from tessera_sdk import ConfigError, Scorer, export_scorer, f32

U32_MAX = 2**32 - 1
TWO_POW_23 = 8388608.0


def round_small(x: float) -> int:
    """The Rust plugin's rounding: nearest, ties to even, clamped to 0..=1000."""
    y = f32(x + TWO_POW_23)
    if y < TWO_POW_23:
        return 0
    return min(int(y - TWO_POW_23), 1000)


class BinPack(Scorer):
    NAME = "binpack"
    VERSION = "0.1.0"
    DESCRIPTION = "prefer the most allocated nodes (CPU, memory, GPU share)"
    CONFIG = {"cpu_weight": 1, "memory_weight": 1, "gpu_weight": 3}

    def __init__(self, config):
        super().__init__(config)
        raw = [config["cpu_weight"], config["memory_weight"], config["gpu_weight"]]
        for key, value in zip(("cpu_weight", "memory_weight", "gpu_weight"), raw):
            if not 0 <= value <= U32_MAX:
                raise ConfigError(f"invalid configuration: `{key}`: {value} is not a u32")
        if sum(raw) == 0:
            raise ValueError("binpack: at least one weight must be positive")
        self.w = [f32(x) for x in raw]
        self.inv_weight_sum = []
        for mask in range(8):
            total = 0.0
            for r in range(3):
                if mask & (1 << r):
                    total = f32(total + self.w[r])
            self.inv_weight_sum.append(f32(1.0 / total) if total > 0.0 else 0.0)
        total = 0.0
        for x in self.w:
            total = f32(total + x)
        self.weight_sum = total
        self.wr = [0.0, 0.0, 0.0]

    def prepare(self, pod, nodes):
        request = (pod.requests.cpu_milli, pod.requests.memory_mib, pod.gpu_demand_milli())
        self.wr = [f32(w * f32(float(r))) for w, r in zip(self.w, request)]

    def score(self, pod, node):
        inv, free, w, wr = node.inv_capacity, node.free_share, self.w, self.wr
        num = self.weight_sum
        for r in range(3):
            num = f32(num + f32(f32(wr[r] * inv[r]) - f32(w[r] * free[r])))
        x = f32(f32(1000.0 * num) * self.inv_weight_sum[node.resource_mask & 7])
        return round_small(x)


Scoring = export_scorer(BinPack)
