/** Rollouts for RL trainers (see README.md). */
export { freshRewardSlots, RolloutEngine } from "./engine.js";
export { RolloutGroup, MAX_GROUP_SIZE } from "./group.js";
export { Rollout } from "./rollout.js";
export { classifyOutcome, infraOutcome } from "./outcome.js";
export type { GoldVerdict } from "./gold.js";
export * from "./types.js";
