// `overload` in JavaScript: the Rust detector (`plugins/overload`) line for line.
//
// - overload: GPU utilisation above `gpu_util_permille` for `gpu_intervals`
//   consecutive intervals (default: > 90% for 5).
// - memory-pressure: free memory below `memory_free_permille` for
//   `memory_intervals` consecutive intervals (default: < 10% for 3).
// Severity grows with how far the latest sample is past the threshold.

import { ConfigError, Detector, exportDetector } from "./tessera_sdk.js";

export class Overload extends Detector {
  static NAME = "overload";
  static VERSION = "0.1.0";
  static DESCRIPTION = "sustained GPU overload and memory pressure";
  static CONFIG = { gpu_util_permille: 900, gpu_intervals: 5, memory_free_permille: 100, memory_intervals: 3 };

  constructor(config) {
    super(config);
    for (const k of ["gpu_util_permille", "memory_free_permille"]) {
      if (!Number.isInteger(config[k]) || config[k] < 0 || config[k] > 65535) {
        throw new ConfigError(`invalid configuration: \`${k}\`: ${config[k]} is not a u16`);
      }
    }
    for (const k of ["gpu_intervals", "memory_intervals"]) {
      if (!Number.isInteger(config[k]) || config[k] < 0) {
        throw new ConfigError(`invalid configuration: \`${k}\`: ${config[k]} is not a usize`);
      }
    }
    if (config.gpu_intervals === 0 || config.memory_intervals === 0) {
      throw new Error("overload: intervals must be at least 1");
    }
    if (config.gpu_util_permille > 1000 || config.memory_free_permille > 1000) {
      throw new Error("overload: thresholds are tenths of a percent (0..=1000)");
    }
  }

  window() {
    return Math.max(this.config.gpu_intervals, this.config.memory_intervals);
  }

  detect(window) {
    const c = this.config;
    const latest = window.latest();
    if (latest === null) return [];
    const gpuT = c.gpu_util_permille;
    const memT = c.memory_free_permille;
    const out = [];
    for (const [node, s] of latest.samples) {
      if (window.consecutive(node, (x) => x.gpuUtilPermille > gpuT) >= c.gpu_intervals) {
        const over = s.gpuUtilPermille - gpuT;
        const room = Math.max(1000 - gpuT, 1);
        out.push({
          node,
          kind: "overload",
          severity: Math.min(500 + Math.floor((500 * over) / room), 1000),
          message: `GPU utilisation above ${gpuT}‰ for ${c.gpu_intervals} consecutive intervals (now ${s.gpuUtilPermille}‰)`,
        });
      }
      if (window.consecutive(node, (x) => x.memoryFreePermille < memT) >= c.memory_intervals) {
        const short = memT - s.memoryFreePermille;
        out.push({
          node,
          kind: "memory-pressure",
          severity: Math.min(500 + Math.floor((500 * short) / Math.max(memT, 1)), 1000),
          message: `free memory below ${memT}‰ for ${c.memory_intervals} consecutive intervals (now ${s.memoryFreePermille}‰)`,
        });
      }
    }
    return out;
  }
}

export const detection = exportDetector(Overload);
