import type { Database } from '../collection/database.js';

/**
 * Every collection of a database with each point as one string (id, vector, payload), sorted: two
 * databases hold the same data exactly when these are equal (replication tests compare a replica with
 * its source so).
 */
export async function pointsOf(db: Database): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  for (const c of (await db.listCollections()).collections) {
    const rows: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { points: { id: string; vector?: number[]; payload?: unknown }[]; next_cursor: string | null } =
        await db.fetch(c.name, { limit: 500, cursor, with_vector: true });
      rows.push(...page.points.map((p) => JSON.stringify([p.id, p.vector, p.payload])));
      cursor = page.next_cursor;
    } while (cursor !== null);
    out[c.name] = rows.sort();
  }
  return out;
}
