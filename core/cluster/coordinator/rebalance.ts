import type { CoordinatorState, MoveRecord, ShardRecord } from './state.js';

export type { MoveRecord } from './state.js';

/**
 * The rebalancer's decisions, as pure functions over the coordinator's state (docs/cluster.md,
 * Rebalancing). One move runs at a time; its target set is fixed when it starts, so every source sends
 * each point to `owner(id, targets)` and a router that routes writes by the set it had before the move
 * reaches the point's source, which either holds the point or answers `moved`.
 *
 * - A move is needed when some shard is `joining`, or `draining` and not yet `moved`.
 * - targets: the active and joining shards (never a draining one); sources: every shard that may hold
 *   points to move, i.e. the active ones and the draining ones not yet moved. Each source moves the
 *   points it does not own in targets; a source with none to move answers `done` at once.
 * - When every source is done: the joining shards of the move turn active, the draining ones are marked
 *   `moved` (routers stop routing to them; DELETE can take them), and the map's version grows.
 */

const ids = (shards: readonly ShardRecord[], keep: (s: ShardRecord) => boolean): number[] => shards.filter(keep).map((s) => s.id).sort((a, b) => a - b);

/** Whether the map asks for a move: a joining shard, or a draining one whose points have not moved yet. */
export function moveNeeded(state: CoordinatorState): boolean {
  return state.shards.some((s) => s.state === 'joining' || (s.state === 'draining' && s.moved !== true));
}

/**
 * The move to start now, saved in the state before it runs (so a restarted coordinator resumes it);
 * null when one runs already, when none is needed, or when no shard would be left to own the points.
 */
export function startMove(state: CoordinatorState): { state: CoordinatorState; move: MoveRecord } | null {
  if (state.move !== null || !moveNeeded(state)) return null;
  const targets = ids(state.shards, (s) => s.state === 'active' || s.state === 'joining');
  if (targets.length === 0) return null;
  const move: MoveRecord = {
    id: `m${state.nextMove}`,
    targets,
    sources: ids(state.shards, (s) => s.state === 'active' || (s.state === 'draining' && s.moved !== true)),
    joining: ids(state.shards, (s) => s.state === 'joining'),
    draining: ids(state.shards, (s) => s.state === 'draining' && s.moved !== true),
  };
  return { state: { ...state, move, nextMove: state.nextMove + 1 }, move };
}

/**
 * The move ended (every source answered done): its joining shards that still join turn active, its
 * draining sources that still drain are `moved`, and the version grows so routers reload. A shard
 * drained while it was a target of this move received points: it is not `moved`, the next move takes them.
 */
export function finishMove(state: CoordinatorState, moveId: string): CoordinatorState {
  const move = state.move;
  if (move === null || move.id !== moveId) return state;
  const shards = state.shards.map((s): ShardRecord => {
    if (s.state === 'joining' && move.joining.includes(s.id)) return { ...s, state: 'active' };
    if (s.state === 'draining' && move.draining.includes(s.id)) return { ...s, moved: true };
    return s;
  });
  return { ...state, version: state.version + 1, shards, move: null };
}

/** Whether a shard is a source of the running move: its points may still be leaving, so it cannot go yet. */
export function movingFrom(state: CoordinatorState, id: number): boolean {
  return state.move !== null && state.move.sources.includes(id);
}
