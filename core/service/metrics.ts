/**
 * What the service and the transports count. The implementation (prom-client) lives in roles/; the
 * labels are the method and the route template, never a concrete path (which would carry ids).
 */
export interface RequestLabels {
  method: string;
  route: string;
}

export interface Metrics {
  requestFinished(labels: RequestLabels, status: number, durationSeconds: number): void;
  authFailure(): void;
  rateLimited(): void;
  /** A Replicate stream began (+1) or ended (-1): svc_replication_followers. */
  replicationFollowers?(delta: 1 | -1): void;
  /** Record bytes a Replicate stream sent: svc_replication_bytes_streamed_total. */
  replicationBytesStreamed?(bytes: number): void;
}

export const noopMetrics: Metrics = {
  requestFinished: () => undefined,
  authFailure: () => undefined,
  rateLimited: () => undefined,
  replicationFollowers: () => undefined,
  replicationBytesStreamed: () => undefined,
};
