/**
 * Reciprocal Rank Fusion exactly as the spec writes it: a document at zero-based rank r in a list
 * contributes 1 / (k0 + r + 1), summed across lists. Best first; equal scores keep the order in which
 * documents were first seen (earlier list, then better rank), so fusion is deterministic.
 */
export function rrf<T extends number | string>(lists: readonly { ids: ArrayLike<T> }[], k0 = 60): { id: T; score: number }[] {
  const scores = new Map<T, number>();
  for (const list of lists) {
    for (let r = 0; r < list.ids.length; r++) {
      const id = list.ids[r];
      scores.set(id, (scores.get(id) ?? 0) + 1 / (k0 + r + 1));
    }
  }
  const order = [...scores.entries()];
  const firstSeen = new Map<T, number>(order.map(([id], i) => [id, i]));
  order.sort((a, b) => b[1] - a[1] || firstSeen.get(a[0])! - firstSeen.get(b[0])!);
  return order.map(([id, score]) => ({ id, score }));
}
