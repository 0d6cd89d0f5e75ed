"""tessera_sdk: write Tessera policies in Python.

A placement policy subclasses `Scorer` and writes `score(pod, node) -> int`
(and optionally `filter`); a detection policy subclasses `Detector` and
writes `detect(window) -> list[Finding]`. The SDK keeps the node mirror the
host feeds through `apply`, makes one pass over the candidates per host
call, and returns exactly one value per candidate, as the contract
`tessera:policy@0.2.2` demands. Units are the contract's: CPU in
millicores, memory in MiB, GPU share in thousandths of a GPU, utilisation
in tenths of a percent.

    from tessera_sdk import Scorer, export_scorer

    class MostFreeCpu(Scorer):
        NAME = "most-free-cpu"
        def score(self, pod, node):
            return node.free.cpu_milli

    Scoring = export_scorer(MostFreeCpu)   # the component's export

The same classes run natively in tests through `ScorerHarness` and
`DetectorHarness`, which are exactly the code the component runs: nothing
here imports the generated bindings until the host calls the component.

This module is shipped by `tessera plugin new --lang python` and mirrors
the Rust SDK (`tessera-sdk`): the same derived node values, the same
errors, and `f32` for arithmetic that must match a Rust plugin bit for bit.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

CONTRACT = "0.2.2"
MAX_GPUS = 16
HEALTHY, DEGRADED, FAILED = "healthy", "degraded", "failed"


def f32(x: float) -> float:
    """`x` rounded to IEEE binary32, as Rust's `f32` would hold it.

    Rounding the result of each +, -, *, / on binary64 values gives exactly
    the binary32 operation's result, so a formula written with `f32` after
    every step scores exactly as a Rust plugin computing in `f32`.
    """
    return struct.unpack("<f", struct.pack("<f", x))[0]


# --- Records, as the host sends them (and as native tests build them) ---


@dataclass
class Resources:
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass
class GpuLink:
    island: int = 0
    pcie_switch: int = 0
    numa_node: int = 0


@dataclass
class GpuRecord:
    index: int = 0
    free_milli: int = 1000
    memory_mib: int = 0
    health: str = HEALTHY
    util_permille: int = 0
    link: GpuLink = field(default_factory=GpuLink)


@dataclass
class NodeRecord:
    id: int = 0
    name: str = ""
    zone: str = ""
    gpu_model: str = ""
    capacity: Resources = field(default_factory=Resources)
    free: Resources = field(default_factory=Resources)
    gpus: list = field(default_factory=list)
    cpu_util_permille: int = 0
    memory_util_permille: int = 0
    ready: bool = True
    workloads: list = field(default_factory=list)
    gpu_classes: list = field(default_factory=list)


@dataclass
class Upsert:
    """A new node, or a new state of one (replaces it whole)."""

    value: NodeRecord


@dataclass
class Remove:
    """The node with this id left the cluster."""

    value: int


def _health(h) -> str:
    # The bindings' enum (GpuHealth.FAILED) or a string.
    name = getattr(h, "name", h)
    return str(name).lower()


def _tier(t) -> str:
    return str(getattr(t, "name", t)).lower()


# --- What policies see ---


class Gpu:
    """One GPU of a node."""

    __slots__ = ("index", "free_milli", "memory_mib", "health", "util_permille", "island", "pcie_switch", "numa_node")

    def __init__(self, index: int, rec):
        self.index = index
        self.free_milli = min(int(rec.free_milli), 1000)
        self.memory_mib = int(rec.memory_mib)
        self.health = _health(rec.health)
        self.util_permille = int(rec.util_permille)
        link = getattr(rec, "link", None)
        self.island = int(getattr(link, "island", 0))
        self.pcie_switch = int(getattr(link, "pcie_switch", 0))
        self.numa_node = int(getattr(link, "numa_node", 0))

    def usable(self) -> bool:
        """Not failed."""
        return self.health != FAILED

    def fits(self, need_milli: int) -> bool:
        """Usable with at least `need_milli` free."""
        return self.usable() and self.free_milli >= need_milli


class Node:
    """A node of the mirror, with the values most scorers derive from it
    computed once per update, as the Rust SDK does."""

    __slots__ = (
        "id", "name", "zone", "gpu_model", "capacity", "free", "gpus", "cpu_util_permille",
        "memory_util_permille", "ready", "workloads", "gpu_classes", "free_gpu_milli",
        "gpu_capacity_milli", "whole_free_gpus", "max_free_gpu_milli", "inv_capacity",
        "free_share", "resource_mask",
    )

    def __init__(self, rec):
        if len(rec.gpus) > MAX_GPUS:
            raise ValueError(f"node {rec.id} ({rec.name}): a node may have at most {MAX_GPUS} GPUs")
        self.id = int(rec.id)
        self.name = rec.name
        self.zone = rec.zone
        self.gpu_model = rec.gpu_model
        self.capacity = Resources(int(rec.capacity.cpu_milli), int(rec.capacity.memory_mib))
        self.free = Resources(int(rec.free.cpu_milli), int(rec.free.memory_mib))
        self.gpus = [Gpu(i, g) for i, g in enumerate(rec.gpus)]
        self.cpu_util_permille = int(rec.cpu_util_permille)
        self.memory_util_permille = int(rec.memory_util_permille)
        self.ready = bool(rec.ready)
        self.workloads = {w.workload: int(w.pods) for w in rec.workloads}
        self.gpu_classes = {getattr(c, "class_", getattr(c, "class", "")): int(c.pods) for c in rec.gpu_classes}
        usable = [g for g in self.gpus if g.usable()]
        self.free_gpu_milli = sum(g.free_milli for g in usable)
        self.gpu_capacity_milli = 1000 * len(self.gpus)
        self.whole_free_gpus = sum(1 for g in usable if g.free_milli == 1000)
        self.max_free_gpu_milli = max((g.free_milli for g in usable), default=0)
        cap = (self.capacity.cpu_milli, self.capacity.memory_mib, self.gpu_capacity_milli)
        free = (self.free.cpu_milli, self.free.memory_mib, self.free_gpu_milli)
        # 1/capacity and free/capacity of CPU, memory and GPU share, in f32;
        # 0 and 1 where the node has none of a resource.
        self.inv_capacity = [0.0, 0.0, 0.0]
        self.free_share = [1.0, 1.0, 1.0]
        self.resource_mask = 0
        for r in range(3):
            if cap[r]:
                self.inv_capacity[r] = f32(1.0 / f32(cap[r]))
                self.free_share[r] = f32(f32(min(free[r], cap[r])) / f32(cap[r]))
                self.resource_mask |= 1 << r

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


class Pod:
    """The pod being placed."""

    __slots__ = ("name", "namespace", "workload", "requests", "gpu_count", "gpu_milli", "allowed_models", "priority", "tier")

    def __init__(self, rec=None, **kw):
        get = (lambda k, d: getattr(rec, k, d)) if rec is not None else (lambda k, d: kw.get(k, d))
        self.name = get("name", "")
        self.namespace = get("namespace", "")
        self.workload = get("workload", "")
        req = get("requests", None) or Resources()
        self.requests = Resources(int(req.cpu_milli), int(req.memory_mib))
        self.gpu_count = int(get("gpu_count", 0))
        self.gpu_milli = int(get("gpu_milli", 1000))
        self.allowed_models = list(get("allowed_models", []))
        self.priority = int(get("priority", 0))
        self.tier = _tier(get("tier", "soft"))

    def gpu_demand_milli(self) -> int:
        """GPU share asked for in all: count times share."""
        return self.gpu_count * self.gpu_milli

    def is_gpu_sharing(self) -> bool:
        """Whether it takes part of one GPU."""
        return self.gpu_count > 0 and self.gpu_milli < 1000


# --- Configuration ---


def parse_config(cls, text: str) -> dict:
    """`cls.CONFIG` (the defaults) overlaid with the JSON object `text`: an
    empty string or `null` gives the defaults; an unknown field or a value
    of the wrong type is an error naming it (like serde's
    `deny_unknown_fields`)."""
    defaults = dict(getattr(cls, "CONFIG", {}))
    text = (text or "").strip()
    if text in ("", "null"):
        return defaults
    try:
        given = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"invalid configuration: {e}") from None
    if not isinstance(given, dict):
        raise ConfigError(f"invalid configuration: expected a JSON object, found {type(given).__name__}")
    for key, value in given.items():
        if key not in defaults:
            expected = ", ".join(f"`{k}`" for k in defaults) or "no fields"
            raise ConfigError(f"invalid configuration: unknown field `{key}`, expected {expected}")
        want = type(defaults[key])
        ok = isinstance(value, want) and not (isinstance(value, bool) and want is not bool)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok:
            raise ConfigError(f"invalid configuration: `{key}`: expected {want.__name__}, found {json.dumps(value)}")
        defaults[key] = value
    return defaults


class ConfigError(ValueError):
    """A configuration the plugin refuses."""


# --- Placement ---


class Scorer:
    """A placement policy, written per node. Override `score` (and
    `filter`); `prepare` runs once per pod before its candidates."""

    NAME = "unnamed"
    VERSION = "0.1.0"
    DESCRIPTION = ""
    #: Reason codes `filter` may return.
    FILTER_REASONS: list = []
    #: Whether `score` names a GPU for sharing pods, as `(score, gpu_index)`.
    SUGGESTS_GPU = False
    #: Configuration fields and their defaults.
    CONFIG: dict = {}

    def __init__(self, config: dict):
        self.config = config

    def prepare(self, pod: Pod, nodes: dict) -> None:
        """Once per host call, before the candidates."""

    def filter(self, pod: Pod, node: Node):
        """None if `node` may take `pod`, else one of `FILTER_REASONS`."""
        return None

    def score(self, pod: Pod, node: Node):
        """Higher is better; `(score, gpu_index)` if `SUGGESTS_GPU`."""
        return 0

    def on_node(self, node: Node) -> None:
        """A node was added or changed."""

    def on_remove(self, node_id: int) -> None:
        """A node left."""


def _unknown(node_id) -> str:
    return f"unknown node id {node_id}: the host and the plugin's mirror disagree"


class ScorerHarness:
    """Runs a `Scorer` over a node mirror, one call per pod: the glue the
    component runs, usable natively in tests."""

    def __init__(self, cls, config_json: str = ""):
        self.plugin = cls(parse_config(cls, config_json))
        self.nodes: dict = {}
        self._reasons = {r: i + 1 for i, r in enumerate(cls.FILTER_REASONS)}

    def apply(self, deltas) -> None:
        """Applies deltas (`Upsert`/`Remove`, or the bindings' own); on an
        invalid record the deltas before it stay applied."""
        for d in deltas:
            if type(d).__name__.endswith("Remove"):
                node_id = int(d.value)
                if self.nodes.pop(node_id, None) is not None:
                    self.plugin.on_remove(node_id)
            else:
                node = Node(d.value)
                self.nodes[node.id] = node
                self.plugin.on_node(node)

    def _candidates(self, candidates):
        nodes = self.nodes
        out = []
        for c in candidates:
            node = nodes.get(c)
            if node is None:
                raise LookupError(_unknown(c))
            out.append(node)
        return out

    def filter(self, pod: Pod, candidates) -> bytes:
        """One verdict per candidate: 0 feasible, k > 0 reason k - 1."""
        nodes = self._candidates(candidates)
        self.plugin.prepare(pod, self.nodes)
        out = bytearray(len(nodes))
        for i, node in enumerate(nodes):
            reason = self.plugin.filter(pod, node)
            if reason is not None:
                code = self._reasons.get(reason)
                if code is None:
                    raise ValueError(f"filter returned {reason!r}, not one of FILTER_REASONS")
                out[i] = code
        return bytes(out)

    def score(self, pod: Pod, candidates):
        """One score per candidate, and one GPU hint per candidate (255 =
        none) if the plugin `SUGGESTS_GPU`, else no hints."""
        nodes = self._candidates(candidates)
        self.plugin.prepare(pod, self.nodes)
        score = self.plugin.score
        if not self.plugin.SUGGESTS_GPU:
            return [int(score(pod, n)) for n in nodes], []
        values, hints = [], []
        for n in nodes:
            s = score(pod, n)
            v, g = s if isinstance(s, tuple) else (s, None)
            values.append(int(v))
            hints.append(255 if g is None else int(g))
        return values, hints


# --- Detection ---


@dataclass
class Sample:
    gpu_util_permille: int = 0
    memory_free_permille: int = 0
    cpu_util_permille: int = 0
    stranded_gpu_milli: int = 0


@dataclass
class Frame:
    """One interval of telemetry: samples by node id."""

    seq: int
    samples: dict

    def get(self, node_id: int):
        return self.samples.get(node_id)


@dataclass
class Finding:
    node: int
    #: "overload", "memory-pressure", "fragmentation", "low-load", or any other text.
    kind: str
    severity: int
    message: str


class Window:
    """The newest frames, oldest first."""

    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self.frames: list = []

    def push(self, frame: Frame) -> None:
        if len(self.frames) == self.capacity:
            self.frames.pop(0)
        self.frames.append(frame)

    def latest(self):
        return self.frames[-1] if self.frames else None

    def consecutive(self, node_id: int, pred) -> int:
        """How many of the newest frames in a row have a sample of
        `node_id` satisfying `pred`."""
        n = 0
        for f in reversed(self.frames):
            s = f.get(node_id)
            if s is None or not pred(s):
                break
            n += 1
        return n


class Detector:
    """A detection policy over a sliding window of telemetry."""

    NAME = "unnamed"
    VERSION = "0.1.0"
    DESCRIPTION = ""
    CONFIG: dict = {}

    def __init__(self, config: dict):
        self.config = config

    def window(self) -> int:
        """Frames to keep."""
        return 1

    def detect(self, window: Window) -> list:
        return []


class DetectorHarness:
    """Runs a `Detector` over its window: the glue the component runs."""

    def __init__(self, cls, config_json: str = ""):
        self.plugin = cls(parse_config(cls, config_json))
        self.window = Window(int(self.plugin.window()))

    def observe_columns(self, seq, nodes, gpu_util, memory_free, cpu_util, stranded) -> None:
        n = len(nodes)
        if any(len(col) != n for col in (gpu_util, memory_free, cpu_util, stranded)):
            raise ValueError(f"telemetry frame {seq}: columns differ in length from {n} nodes")
        samples = {}
        for i in sorted(range(n), key=lambda i: nodes[i]):
            samples[int(nodes[i])] = Sample(int(gpu_util[i]), int(memory_free[i]), int(cpu_util[i]), int(stranded[i]))
        self.window.push(Frame(int(seq), samples))

    def observe(self, frame: Frame) -> None:
        self.window.push(Frame(frame.seq, dict(sorted(frame.samples.items()))))

    def detect(self) -> list:
        return list(self.plugin.detect(self.window))


# --- The component's exports (componentize-py) ---


def _err(e: BaseException):
    """The `Err` a plugin's exception becomes; out of memory stays what it
    is, so the call traps and the host counts a memory fault."""
    from componentize_py_types import Err

    if isinstance(e, MemoryError):
        return e
    if isinstance(e, (ValueError, LookupError)):
        return Err(str(e))
    return Err(f"{type(e).__name__}: {e}")


def _info(cls, reasons):
    from wit_world.imports import types

    return types.PluginInfo(name=cls.NAME, version=cls.VERSION, description=cls.DESCRIPTION, filter_reasons=list(reasons))


_NOT_CONFIGURED = "the plugin was called before `configure`"


def export_scorer(cls):
    """The `scoring` export for `cls`: assign it to a module-level name
    `Scoring` in the app module componentize-py builds."""

    class Scoring:
        harness = None

        def info(self):
            return _info(cls, cls.FILTER_REASONS)

        def configure(self, config: str) -> None:
            try:
                Scoring.harness = ScorerHarness(cls, config)
            except Exception as e:
                raise _err(e)

        def _h(self):
            if Scoring.harness is None:
                from componentize_py_types import Err

                raise Err(_NOT_CONFIGURED)
            return Scoring.harness

        def apply(self, deltas) -> None:
            h = self._h()
            try:
                h.apply(deltas)
            except Exception as e:
                raise _err(e)

        def filter(self, pod, candidates) -> bytes:
            h = self._h()
            try:
                return h.filter(Pod(pod), candidates)
            except Exception as e:
                raise _err(e)

        def score(self, pod, candidates):
            from wit_world.imports import types

            h = self._h()
            try:
                values, hints = h.score(Pod(pod), candidates)
            except Exception as e:
                raise _err(e)
            return types.Scores(values=values, gpu_hints=bytes(hints))

    return Scoring


def _finding_kind(kind: str):
    from wit_world.imports import types

    known = {
        "overload": types.FindingKind_Overload,
        "memory-pressure": types.FindingKind_MemoryPressure,
        "fragmentation": types.FindingKind_Fragmentation,
        "low-load": types.FindingKind_LowLoad,
    }
    k = known.get(kind)
    return k() if k is not None else types.FindingKind_Other(kind)


def export_detector(cls):
    """The `detection` export for `cls`: assign it to `Detection` in the
    app module."""

    class Detection:
        harness = None

        def info(self):
            return _info(cls, [])

        def configure(self, config: str) -> None:
            try:
                Detection.harness = DetectorHarness(cls, config)
            except Exception as e:
                raise _err(e)

        def _h(self):
            if Detection.harness is None:
                from componentize_py_types import Err

                raise Err(_NOT_CONFIGURED)
            return Detection.harness

        def observe(self, frame) -> None:
            h = self._h()
            try:
                h.observe_columns(
                    frame.seq, frame.nodes, frame.gpu_util_permille, frame.memory_free_permille,
                    frame.cpu_util_permille, frame.stranded_gpu_milli,
                )
            except Exception as e:
                raise _err(e)

        def detect(self):
            from wit_world.imports import types

            h = self._h()
            try:
                found = h.detect()
            except Exception as e:
                raise _err(e)
            return [
                types.Finding(node=f.node, kind=_finding_kind(f.kind), severity=f.severity, message=f.message)
                for f in found
            ]

    return Detection


# --- The host's functions ---


def log(level: str, message: str) -> None:
    """Writes a line to the host's log (trace, debug, info, warn, error)."""
    from wit_world.imports import host

    host.log(getattr(host.LogLevel, level.upper()), message)


def random_u64() -> int:
    """Next value of the host's seeded random stream (replays exactly)."""
    from wit_world.imports import host

    return host.random_u64()


def zone_carbon_intensity(zone: str):
    """gCO2/kWh of `zone` as the host knows it, or None."""
    from wit_world.imports import host

    return host.zone_carbon_intensity(zone)
