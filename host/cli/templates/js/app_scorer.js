// {{name}}: a Tessera placement policy (filter and score), in JavaScript.
//
// `filter` keeps the pod off nodes whose CPU is busier than the configured
// limit; `score` prefers the node with the most free GPU share, then the
// most free CPU. Units are the contract's: CPU in millicores, GPU share in
// thousandths of a GPU, utilisation in tenths of a percent.

import { ConfigError, Scorer, exportScorer } from "./tessera_sdk.js";

export class Policy extends Scorer {
  static NAME = "{{name}}";
  static VERSION = "0.1.0";
  static DESCRIPTION = "most free GPU share, then most free CPU; skips busy nodes";
  static FILTER_REASONS = ["CPU-BUSY"];
  // Every field the policy document may set, with its default; anything
  // else is refused at load, naming the field.
  static CONFIG = { max_cpu_util_permille: 900 };

  constructor(config) {
    super(config);
    const m = config.max_cpu_util_permille;
    if (!Number.isInteger(m) || m < 0 || m > 1000) {
      throw new ConfigError("max_cpu_util_permille: tenths of a percent, 0..=1000");
    }
  }

  filter(_pod, node) {
    return node.cpuUtilPermille > this.config.max_cpu_util_permille ? "CPU-BUSY" : null;
  }

  score(_pod, node) {
    // Higher is better; the host normalises scores across candidates.
    return node.freeGpuMilli * 1_000_000 + node.free.cpuMilli;
  }
}

// The component's export: componentize-js looks for `scoring` here.
export const scoring = exportScorer(Policy);
