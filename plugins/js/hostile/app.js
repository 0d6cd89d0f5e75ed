// A hostile JavaScript plugin, for the containment tests: well-behaved on
// calls with fewer than `min_candidates` candidates (so it passes the load
// check), then, by `mode`: `loop` for ever, `alloc` without bound, `raise`
// an exception, or answer `short` (one score too few).

import { Scorer, exportScorer } from "./tessera_sdk.js";

class Hostile extends Scorer {
  static NAME = "hostile";
  static VERSION = "0.1.0";
  static DESCRIPTION = "misbehaves on purpose";
  static CONFIG = { mode: "none", min_candidates: 5 };

  prepare() {
    this.seen = 0;
  }

  score() {
    this.seen += 1;
    if (this.seen === this.config.min_candidates) {
      const mode = this.config.mode;
      if (mode === "loop") for (;;) {}
      if (mode === "alloc") {
        const hoard = [];
        for (;;) hoard.push(new Uint8Array(64 << 20).fill(1));
      }
      if (mode === "raise") throw new Error("hostile on purpose");
    }
    return 0;
  }
}

const base = exportScorer(Hostile);
let mode = "none";
export const scoring = {
  ...base,
  configure(config) {
    base.configure(config);
    mode = JSON.parse(config || "null")?.mode ?? "none";
  },
  score(pod, candidates) {
    const out = base.score(pod, candidates);
    if (mode === "short" && candidates.length >= 5) out.values = out.values.slice(0, -1);
    return out;
  },
};
