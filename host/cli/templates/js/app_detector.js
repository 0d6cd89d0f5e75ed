// {{name}}: a Tessera detection policy, in JavaScript.
//
// Reports a node whose GPUs have sat idle (utilisation at or below
// `idle_permille`) for `intervals` consecutive telemetry intervals: a
// candidate for consolidation.

import { ConfigError, Detector, exportDetector } from "./tessera_sdk.js";

export class Policy extends Detector {
  static NAME = "{{name}}";
  static VERSION = "0.1.0";
  static DESCRIPTION = "GPUs idle for several intervals";
  static CONFIG = { idle_permille: 50, intervals: 3 };

  constructor(config) {
    super(config);
    if (!Number.isInteger(config.intervals) || config.intervals < 1) {
      throw new ConfigError("intervals: at least 1");
    }
  }

  window() {
    return this.config.intervals;
  }

  detect(window) {
    const { idle_permille: idle, intervals: n } = this.config;
    const latest = window.latest();
    if (latest === null) return [];
    const out = [];
    for (const [node, s] of latest.samples) {
      if (window.consecutive(node, (x) => x.gpuUtilPermille <= idle) >= n) {
        out.push({
          node,
          kind: "low-load",
          severity: 500,
          message: `GPU utilisation at or below ${idle}‰ for ${n} intervals (now ${s.gpuUtilPermille}‰)`,
        });
      }
    }
    return out;
  }
}

// The component's export: componentize-js looks for `detection` here.
export const detection = exportDetector(Policy);
