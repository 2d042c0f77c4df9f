/**
 * Small helpers for the internal ops dashboard (React, Vite).
 * Formatting byte counts, consumer lag and relative times consistently.
 */

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"] as const;

/**
 * Format a byte count with binary units.
 * formatBytes(1536) === "1.5 KiB"; formatBytes(0) === "0 B"
 */
export function formatBytes(bytes: number, decimals = 1): string {
  if (!Number.isFinite(bytes) || bytes < 0) return "–";
  if (bytes < 1024) return `${bytes} B`;
  const exp = Math.min(Math.floor(Math.log(bytes) / Math.log(1024)), UNITS.length - 1);
  const value = bytes / 1024 ** exp;
  return `${value.toFixed(decimals).replace(/\.0+$/, "")} ${UNITS[exp]}`;
}

/** Compact lag numbers: 1930000 → "1.93M", 2048 → "2.0k". */
export function formatLag(messages: number): string {
  if (messages >= 1_000_000) return `${(messages / 1_000_000).toFixed(2)}M`;
  if (messages >= 1_000) return `${(messages / 1_000).toFixed(1)}k`;
  return String(messages);
}

export type LagLevel = "ok" | "warn" | "critical";

/**
 * Traffic-light level for consumer lag. Thresholds from the prod deploy checklist:
 * anything above 50k during a canary is a stop signal; above 100k pages.
 */
export function lagLevel(messages: number, thresholds = { warn: 50_000, critical: 100_000 }): LagLevel {
  if (messages >= thresholds.critical) return "critical";
  if (messages >= thresholds.warn) return "warn";
  return "ok";
}

/** "3 min ago", "2 h ago", "5 d ago" — always relative to `now` (UTC ms). */
export function timeAgo(isoTimestamp: string, now: number = Date.now()): string {
  const diffS = Math.round((now - Date.parse(isoTimestamp)) / 1000);
  if (Number.isNaN(diffS)) return "–";
  if (diffS < 60) return `${diffS} s ago`;
  if (diffS < 3600) return `${Math.floor(diffS / 60)} min ago`;
  if (diffS < 86400) return `${Math.floor(diffS / 3600)} h ago`;
  return `${Math.floor(diffS / 86400)} d ago`;
}

export class RollingAverage {
  private readonly values: number[] = [];

  constructor(private readonly size: number) {
    if (size <= 0) throw new Error("size must be positive");
  }

  push(v: number): number {
    this.values.push(v);
    if (this.values.length > this.size) this.values.shift();
    return this.mean();
  }

  mean(): number {
    return this.values.length === 0 ? 0 : this.values.reduce((a, b) => a + b, 0) / this.values.length;
  }
}
