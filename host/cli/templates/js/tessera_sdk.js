// tessera_sdk: write Tessera policies in JavaScript.
//
// A placement policy extends `Scorer` and writes `score(pod, node)` (and
// optionally `filter`); a detection policy extends `Detector` and writes
// `detect(window)`. The SDK keeps the node mirror the host feeds through
// `apply`, makes one pass over the candidates per host call, and returns
// exactly one value per candidate, as the contract `tessera:policy@0.2.2`
// demands. Units are the contract's: CPU in millicores, memory in MiB, GPU
// share in thousandths of a GPU, utilisation in tenths of a percent. The
// host's 64-bit integers arrive as BigInt and are handed to policies as
// Numbers (exact below 2^53).
//
//     import { Scorer, exportScorer } from "./tessera_sdk.js";
//     class MostFreeCpu extends Scorer {
//       static NAME = "most-free-cpu";
//       score(pod, node) { return node.free.cpuMilli; }
//     }
//     export const scoring = exportScorer(MostFreeCpu);
//
// The same classes run under Node.js in tests through `ScorerHarness` and
// `DetectorHarness`, which are exactly the code the component runs.
// Shipped by `tessera plugin new --lang js`; mirrors the Rust SDK
// (`tessera-sdk`): the same derived node values, the same errors, and
// `f32` (Math.fround) for arithmetic that must match a Rust plugin bit for
// bit.

export const CONTRACT = "0.2.2";
export const MAX_GPUS = 16;

/** `x` rounded to IEEE binary32, as Rust's `f32` holds it. */
export const f32 = Math.fround;

const num = (x) => (typeof x === "bigint" ? Number(x) : x);
const lower = (x) => String(x).toLowerCase();

/** A configuration the plugin refuses. */
export class ConfigError extends Error {}

/** One GPU of a node. */
export class Gpu {
  constructor(index, rec) {
    this.index = index;
    this.freeMilli = Math.min(num(rec.freeMilli), 1000);
    this.memoryMib = num(rec.memoryMib ?? 0);
    this.health = lower(rec.health ?? "healthy");
    this.utilPermille = num(rec.utilPermille ?? 0);
    const link = rec.link ?? {};
    this.island = link.island ?? 0;
    this.pcieSwitch = link.pcieSwitch ?? 0;
    this.numaNode = link.numaNode ?? 0;
  }
  usable() {
    return this.health !== "failed";
  }
  fits(needMilli) {
    return this.usable() && this.freeMilli >= needMilli;
  }
}

/** A node of the mirror, with the values most scorers derive from it
 * computed once per update, as the Rust SDK does. */
export class Node {
  constructor(rec) {
    const gpus = rec.gpus ?? [];
    if (gpus.length > MAX_GPUS) {
      throw new Error(`node ${rec.id} (${rec.name}): a node may have at most ${MAX_GPUS} GPUs`);
    }
    this.id = num(rec.id);
    this.name = rec.name ?? "";
    this.zone = rec.zone ?? "";
    this.gpuModel = rec.gpuModel ?? "";
    const cap = rec.capacity ?? {};
    const free = rec.free ?? {};
    this.capacity = { cpuMilli: num(cap.cpuMilli ?? 0), memoryMib: num(cap.memoryMib ?? 0) };
    this.free = { cpuMilli: num(free.cpuMilli ?? 0), memoryMib: num(free.memoryMib ?? 0) };
    this.gpus = gpus.map((g, i) => new Gpu(i, g));
    this.cpuUtilPermille = num(rec.cpuUtilPermille ?? 0);
    this.memoryUtilPermille = num(rec.memoryUtilPermille ?? 0);
    this.ready = rec.ready ?? true;
    this.workloads = new Map((rec.workloads ?? []).map((w) => [w.workload, num(w.pods)]));
    this.gpuClasses = new Map((rec.gpuClasses ?? []).map((c) => [c["class"], num(c.pods)]));
    const usable = this.gpus.filter((g) => g.usable());
    this.freeGpuMilli = usable.reduce((s, g) => s + g.freeMilli, 0);
    this.gpuCapacityMilli = 1000 * this.gpus.length;
    this.wholeFreeGpus = usable.filter((g) => g.freeMilli === 1000).length;
    this.maxFreeGpuMilli = usable.reduce((m, g) => Math.max(m, g.freeMilli), 0);
    const caps = [this.capacity.cpuMilli, this.capacity.memoryMib, this.gpuCapacityMilli];
    const frees = [this.free.cpuMilli, this.free.memoryMib, this.freeGpuMilli];
    // 1/capacity and free/capacity of CPU, memory and GPU share, in f32;
    // 0 and 1 where the node has none of a resource.
    this.invCapacity = [0, 0, 0];
    this.freeShare = [1, 1, 1];
    this.resourceMask = 0;
    for (let r = 0; r < 3; r++) {
      if (caps[r] !== 0) {
        this.invCapacity[r] = f32(1 / f32(caps[r]));
        this.freeShare[r] = f32(f32(Math.min(frees[r], caps[r])) / f32(caps[r]));
        this.resourceMask |= 1 << r;
      }
    }
  }
  get gpuCount() {
    return this.gpus.length;
  }
}

/** The pod being placed. */
export class Pod {
  constructor(rec = {}) {
    this.name = rec.name ?? "";
    this.namespace = rec.namespace ?? "";
    this.workload = rec.workload ?? "";
    const req = rec.requests ?? {};
    this.requests = { cpuMilli: num(req.cpuMilli ?? 0), memoryMib: num(req.memoryMib ?? 0) };
    this.gpuCount = num(rec.gpuCount ?? 0);
    this.gpuMilli = num(rec.gpuMilli ?? 1000);
    this.allowedModels = [...(rec.allowedModels ?? [])];
    this.priority = num(rec.priority ?? 0);
    this.tier = lower(rec.tier ?? "soft");
  }
  gpuDemandMilli() {
    return this.gpuCount * this.gpuMilli;
  }
  isGpuSharing() {
    return this.gpuCount > 0 && this.gpuMilli < 1000;
  }
}

const typeOf = (v) => (v === null ? "null" : Array.isArray(v) ? "array" : Number.isInteger(v) ? "integer" : typeof v);

/** `cls.CONFIG` (the defaults) overlaid with the JSON object `text`: empty
 * or `null` gives the defaults; an unknown field or a value of the wrong
 * type is an error naming it (like serde's `deny_unknown_fields`). */
export function parseConfig(cls, text) {
  const defaults = { ...(cls.CONFIG ?? {}) };
  const t = (text ?? "").trim();
  if (t === "" || t === "null") return defaults;
  let given;
  try {
    given = JSON.parse(t);
  } catch (e) {
    throw new ConfigError(`invalid configuration: ${e.message}`);
  }
  if (typeOf(given) !== "object") {
    throw new ConfigError(`invalid configuration: expected a JSON object, found ${typeOf(given)}`);
  }
  for (const [key, value] of Object.entries(given)) {
    if (!Object.hasOwn(defaults, key)) {
      const expected = Object.keys(defaults).map((k) => `\`${k}\``).join(", ") || "no fields";
      throw new ConfigError(`invalid configuration: unknown field \`${key}\`, expected ${expected}`);
    }
    const want = typeOf(defaults[key]);
    const got = typeOf(value);
    if (want !== got && !(want === "number" && got === "integer")) {
      throw new ConfigError(`invalid configuration: \`${key}\`: expected ${want}, found ${JSON.stringify(value)}`);
    }
    defaults[key] = value;
  }
  return defaults;
}

/** A placement policy, written per node. */
export class Scorer {
  static NAME = "unnamed";
  static VERSION = "0.1.0";
  static DESCRIPTION = "";
  /** Reason codes `filter` may return. */
  static FILTER_REASONS = [];
  /** Whether `score` names a GPU for sharing pods, as `[score, gpuIndex]`. */
  static SUGGESTS_GPU = false;
  /** Configuration fields and their defaults. */
  static CONFIG = {};
  constructor(config) {
    this.config = config;
  }
  /** Once per host call, before the candidates. */
  prepare(_pod, _nodes) {}
  /** `null` if `node` may take `pod`, else one of `FILTER_REASONS`. */
  filter(_pod, _node) {
    return null;
  }
  /** Higher is better; `[score, gpuIndex]` if `SUGGESTS_GPU`. */
  score(_pod, _node) {
    return 0;
  }
  onNode(_node) {}
  onRemove(_id) {}
}

const unknown = (id) => `unknown node id ${id}: the host and the plugin's mirror disagree`;

/** Runs a `Scorer` over a node mirror, one call per pod: the glue the
 * component runs, usable under Node.js in tests. */
export class ScorerHarness {
  constructor(cls, configJson = "") {
    this.cls = cls;
    this.plugin = new cls(parseConfig(cls, configJson));
    this.nodes = new Map();
  }
  /** Deltas `{tag: "upsert", val: node}` / `{tag: "remove", val: id}`; on
   * an invalid record the deltas before it stay applied. */
  apply(deltas) {
    for (const d of deltas) {
      if (d.tag === "remove") {
        const id = num(d.val);
        if (this.nodes.delete(id)) this.plugin.onRemove(id);
      } else {
        const node = new Node(d.val);
        this.nodes.set(node.id, node);
        this.plugin.onNode(node);
      }
    }
  }
  candidates(ids) {
    const out = new Array(ids.length);
    for (let i = 0; i < ids.length; i++) {
      const n = this.nodes.get(num(ids[i]));
      if (n === undefined) throw new Error(unknown(ids[i]));
      out[i] = n;
    }
    return out;
  }
  /** One verdict per candidate: 0 feasible, k > 0 reason k - 1. */
  filter(pod, ids) {
    const nodes = this.candidates(ids);
    this.plugin.prepare(pod, this.nodes);
    const out = new Uint8Array(nodes.length);
    const reasons = this.cls.FILTER_REASONS;
    nodes.forEach((n, i) => {
      const r = this.plugin.filter(pod, n);
      if (r !== null && r !== undefined) {
        const k = reasons.indexOf(r);
        if (k < 0) throw new Error(`filter returned ${JSON.stringify(r)}, not one of FILTER_REASONS`);
        out[i] = k + 1;
      }
    });
    return out;
  }
  /** `{values, hints}`: one score per candidate, and one GPU hint per
   * candidate (255 = none) if the plugin `SUGGESTS_GPU`, else none. */
  score(pod, ids) {
    const nodes = this.candidates(ids);
    this.plugin.prepare(pod, this.nodes);
    const values = new Array(nodes.length);
    if (!this.cls.SUGGESTS_GPU) {
      for (let i = 0; i < nodes.length; i++) values[i] = this.plugin.score(pod, nodes[i]);
      return { values, hints: [] };
    }
    const hints = new Array(nodes.length);
    for (let i = 0; i < nodes.length; i++) {
      const s = this.plugin.score(pod, nodes[i]);
      const [v, g] = Array.isArray(s) ? s : [s, null];
      values[i] = v;
      hints[i] = g === null || g === undefined ? 255 : g;
    }
    return { values, hints };
  }
}

/** The newest telemetry frames, oldest first. A frame is `{seq, samples}`
 * with `samples` a Map from node id to `{gpuUtilPermille,
 * memoryFreePermille, cpuUtilPermille, strandedGpuMilli}`, by node id. */
export class Window {
  constructor(capacity) {
    this.capacity = Math.max(1, capacity);
    this.frames = [];
  }
  push(frame) {
    if (this.frames.length === this.capacity) this.frames.shift();
    this.frames.push(frame);
  }
  latest() {
    return this.frames.length ? this.frames[this.frames.length - 1] : null;
  }
  /** How many of the newest frames in a row have a sample of `id`
   * satisfying `pred`. */
  consecutive(id, pred) {
    let n = 0;
    for (let i = this.frames.length - 1; i >= 0; i--) {
      const s = this.frames[i].samples.get(id);
      if (s === undefined || !pred(s)) break;
      n++;
    }
    return n;
  }
}

/** A detection policy over a sliding window of telemetry. Findings are
 * `{node, kind, severity, message}`; `kind` is "overload",
 * "memory-pressure", "fragmentation", "low-load" or any other text. */
export class Detector {
  static NAME = "unnamed";
  static VERSION = "0.1.0";
  static DESCRIPTION = "";
  static CONFIG = {};
  constructor(config) {
    this.config = config;
  }
  /** Frames to keep. */
  window() {
    return 1;
  }
  detect(_window) {
    return [];
  }
}

/** Runs a `Detector` over its window: the glue the component runs. */
export class DetectorHarness {
  constructor(cls, configJson = "") {
    this.plugin = new cls(parseConfig(cls, configJson));
    this.window = new Window(this.plugin.window());
  }
  /** One frame as the host sends it: columns over `nodes`. */
  observe(frame) {
    const ids = [...frame.nodes].map(num);
    const cols = [frame.gpuUtilPermille, frame.memoryFreePermille, frame.cpuUtilPermille, frame.strandedGpuMilli];
    if (cols.some((c) => c.length !== ids.length)) {
      throw new Error(`telemetry frame ${frame.seq}: columns differ in length from ${ids.length} nodes`);
    }
    const order = ids.map((_, i) => i).sort((a, b) => ids[a] - ids[b]);
    const samples = new Map();
    for (const i of order) {
      samples.set(ids[i], {
        gpuUtilPermille: num(cols[0][i]),
        memoryFreePermille: num(cols[1][i]),
        cpuUtilPermille: num(cols[2][i]),
        strandedGpuMilli: num(cols[3][i]),
      });
    }
    this.window.push({ seq: num(frame.seq), samples });
  }
  detect() {
    return [...this.plugin.detect(this.window)];
  }
}

// --- The component's exports (componentize-js) ---

const NOT_CONFIGURED = "the plugin was called before `configure`";

// A thrown string becomes the call's `err`.
function guard(f) {
  try {
    return f();
  } catch (e) {
    if (typeof e === "string") throw e;
    throw e instanceof ConfigError || e?.constructor === Error ? e.message : `${e?.name ?? "Error"}: ${e?.message ?? e}`;
  }
}

function info(cls, reasons) {
  return { name: cls.NAME, version: cls.VERSION, description: cls.DESCRIPTION, filterReasons: [...reasons] };
}

/** The `scoring` export for `cls`: `export const scoring = exportScorer(cls)`. */
export function exportScorer(cls) {
  let harness = null;
  const h = () => {
    if (harness === null) throw NOT_CONFIGURED;
    return harness;
  };
  return {
    info: () => info(cls, cls.FILTER_REASONS),
    configure: (config) =>
      guard(() => {
        harness = new ScorerHarness(cls, config);
      }),
    apply: (deltas) => guard(() => h().apply(deltas)),
    filter: (pod, candidates) => guard(() => h().filter(new Pod(pod), candidates)),
    score: (pod, candidates) =>
      guard(() => {
        const { values, hints } = h().score(new Pod(pod), candidates);
        return { values: values.map((v) => BigInt(Math.trunc(v))), gpuHints: Uint8Array.from(hints) };
      }),
  };
}

/** The `detection` export for `cls`: `export const detection = exportDetector(cls)`. */
export function exportDetector(cls) {
  let harness = null;
  const h = () => {
    if (harness === null) throw NOT_CONFIGURED;
    return harness;
  };
  const known = new Set(["overload", "memory-pressure", "fragmentation", "low-load"]);
  return {
    info: () => info(cls, []),
    configure: (config) =>
      guard(() => {
        harness = new DetectorHarness(cls, config);
      }),
    observe: (frame) => guard(() => h().observe(frame)),
    detect: () =>
      guard(() =>
        h()
          .detect()
          .map((f) => ({
            node: f.node,
            kind: known.has(f.kind) ? { tag: f.kind } : { tag: "other", val: String(f.kind) },
            severity: f.severity,
            message: f.message,
          })),
      ),
  };
}
