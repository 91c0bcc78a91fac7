/**
 * The order of point ids (CONTRACT.md section 1): ascending by their UTF-8 bytes, which is code point
 * order. JavaScript's `<` compares UTF-16 units instead, and the two differ only where a code point above
 * U+FFFF (a surrogate pair, D800-DFFF) meets a unit in E000-FFFF: in UTF-8 the first sorts after.
 * No allocation, unlike comparing Buffer.from of each id. Ids are valid Unicode (names.ts).
 */
export function compareIdsUtf8(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys) return xs ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}
