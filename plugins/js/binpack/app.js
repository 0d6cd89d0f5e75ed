// `binpack` in JavaScript: the Rust plugin (`plugins/binpack`) line for line.
//
// Packs pods onto the most allocated nodes: the score is the weighted mean
// over CPU, memory and GPU share of the node's utilisation after placing
// the pod, in thousandths. The arithmetic is the Rust plugin's, in f32 step
// by step (Math.fround), so both give the same integer for every node: the
// test suite checks they place every pod alike.

import { ConfigError, Scorer, exportScorer, f32 } from "./tessera_sdk.js";

const U32_MAX = 2 ** 32 - 1;
const TWO_POW_23 = 8388608;

/** The Rust plugin's rounding: nearest, ties to even, clamped to 0..=1000. */
export function roundSmall(x) {
  const y = f32(x + TWO_POW_23);
  return y < TWO_POW_23 ? 0 : Math.min(y - TWO_POW_23, 1000);
}

export class BinPack extends Scorer {
  static NAME = "binpack";
  static VERSION = "0.1.0";
  static DESCRIPTION = "prefer the most allocated nodes (CPU, memory, GPU share)";
  static CONFIG = { cpu_weight: 1, memory_weight: 1, gpu_weight: 3 };

  constructor(config) {
    super(config);
    const keys = ["cpu_weight", "memory_weight", "gpu_weight"];
    const raw = keys.map((k) => config[k]);
    keys.forEach((k, i) => {
      if (!Number.isInteger(raw[i]) || raw[i] < 0 || raw[i] > U32_MAX) {
        throw new ConfigError(`invalid configuration: \`${k}\`: ${raw[i]} is not a u32`);
      }
    });
    if (raw[0] + raw[1] + raw[2] === 0) throw new Error("binpack: at least one weight must be positive");
    this.w = raw.map(f32);
    this.invWeightSum = [];
    for (let mask = 0; mask < 8; mask++) {
      let sum = 0;
      for (let r = 0; r < 3; r++) if (mask & (1 << r)) sum = f32(sum + this.w[r]);
      this.invWeightSum.push(sum > 0 ? f32(1 / sum) : 0);
    }
    this.weightSum = this.w.reduce((s, x) => f32(s + x), 0);
    this.wr = [0, 0, 0];
  }

  prepare(pod) {
    const request = [pod.requests.cpuMilli, pod.requests.memoryMib, pod.gpuDemandMilli()];
    this.wr = this.w.map((w, r) => f32(w * f32(request[r])));
  }

  score(_pod, node) {
    const inv = node.invCapacity;
    const free = node.freeShare;
    const w = this.w;
    const wr = this.wr;
    let num = this.weightSum;
    for (let r = 0; r < 3; r++) num = f32(num + f32(f32(wr[r] * inv[r]) - f32(w[r] * free[r])));
    return roundSmall(f32(f32(1000 * num) * this.invWeightSum[node.resourceMask & 7]));
  }
}

export const scoring = exportScorer(BinPack);
