/**
 * A one-line progress display for a terminal: points read, imported, points/s and, when the source
 * knows its size, percent and ETA. On a non-terminal it prints nothing (logs stay clean).
 */

export interface ProgressStream {
  isTTY?: boolean;
  columns?: number;
  write(s: string): boolean;
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** The line itself, pure so it can be tested: `fraction` null means the total is unknown. */
export function progressLine(read: number, imported: number, elapsedMs: number, fraction: number | null, width = 80): string {
  const secs = Math.max(elapsedMs / 1000, 1e-3);
  const rate = imported / secs;
  const parts = [`${read} read`, `${imported} imported`, `${Math.round(rate)} points/s`];
  if (fraction !== null && fraction > 0) {
    const eta = fraction >= 1 ? 0 : secs * (1 - fraction) / fraction;
    const barWidth = Math.max(0, Math.min(30, width - parts.join(', ').length - 22));
    const filled = Math.round(barWidth * Math.min(1, fraction));
    const bar = barWidth >= 5 ? `[${'#'.repeat(filled)}${'.'.repeat(barWidth - filled)}] ` : '';
    parts.unshift(`${bar}${(fraction * 100).toFixed(1)}%`);
    parts.push(`ETA ${formatDuration(eta)}`);
  }
  return parts.join(', ').slice(0, Math.max(10, width - 1));
}

export class Progress {
  private last = 0;
  private shown = false;
  private readonly start: number;

  constructor(
    private readonly out: ProgressStream,
    private readonly fraction: () => number | null,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.start = now();
  }

  update(read: number, imported: number, force = false): void {
    if (!this.out.isTTY) return;
    const t = this.now();
    if (!force && t - this.last < 200) return;
    this.last = t;
    this.shown = true;
    this.out.write(`\r\x1b[2K${progressLine(read, imported, t - this.start, this.fraction(), this.out.columns ?? 80)}`);
  }

  /** Clears the line so a message (a skipped row, the summary) starts at column 0. */
  clear(): void {
    if (this.out.isTTY && this.shown) this.out.write('\r\x1b[2K');
  }

  elapsedMs(): number {
    return this.now() - this.start;
  }
}
