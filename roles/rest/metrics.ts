import { Counter, Gauge, Registry, type Metric } from 'prom-client';
import type { FollowerStats } from '../../core/cluster/replication/follower.js';
import type { SearchPoolStats } from '../../core/collection/search-pool.js';
import type { DatabaseStats } from '../../core/service/api.js';
import type { Metrics, RequestLabels } from '../../core/service/metrics.js';
import type { ConnectionMetrics, ConnectionTransport, RefusalReason } from '../connection-limits.js';

/**
 * prom-client implementation of core/service/metrics.ts, plus engine gauges read at scrape time.
 * The engine gauges are totals without collection labels: /metrics is open, so it names no collection.
 */
export interface PromMetrics extends Metrics, ConnectionMetrics {
  readonly registry: Registry;
  /** requestFinished for one method and route, looked up once (a route's own onResponse hook). */
  recorder(labels: RequestLabels): (status: number, durationSeconds: number) => void;
  /** Where the engine gauges come from; null until the database is open. */
  setStatsSource(source: (() => Promise<DatabaseStats>) | null): void;
  /** The search pool's counters (Database.searchPoolStats); null, or a source answering null, without a pool. */
  setSearchPoolSource(source: (() => SearchPoolStats | null) | null): void;
  /** A read replica's replication state (core/cluster/replication/follower.ts); null on a leader. */
  setReplicationSource(source: (() => FollowerStats) | null): void;
  /** A consensus member's state and its transport's counters (roles/raft/member-host.ts); registers the svc_raft_* series. */
  setConsensusSource(source: () => ConsensusMetricsSource): void;
}

/** What the svc_raft_* series show (a member's view, its transport's and forwarder's counters). */
export interface ConsensusMetricsSource {
  role: 'leader' | 'follower' | 'candidate';
  term: number;
  commitIndex: number;
  appliedIndex: number;
  snapshotIndex: number;
  /** Times this member stopped waiting for a leader whose address refused connections (Raft.leaderGone). */
  leaderGone: number;
  transport: {
    messagesSent: number; messagesReceived: number; bytesSent: number; reconnects: number; deadLinks: number;
    dropped: Readonly<Record<string, number>>; rejected: Readonly<Record<string, number>>;
  };
  forward: { forwarded: number; served: number; malformed: number; unanswered: number };
  /** Database images streamed to members behind the log, and received (core/cluster/consensus/snapshot-stream.ts). */
  snapshots: { sent: number; bytesSent: number; failed: number; received: number; dropped: number; refused: number; resumed: number; chunksResent: number };
}

export function createPromMetrics(): PromMetrics {
  const registry = new Registry();
  const series = new Map<string, HttpSeries>();
  const seriesOf = (l: RequestLabels): HttpSeries => {
    const key = `${l.method} ${l.route}`;
    let x = series.get(key);
    if (x === undefined) {
      x = newSeries(l);
      series.set(key, x);
    }
    return x;
  };
  registerHttpSeries(registry, series);
  const authFailures = new Counter({ name: 'svc_auth_failures_total', help: 'Rejected authentications', registers: [registry] });
  const rateLimited = new Counter({ name: 'svc_rate_limited_total', help: 'Requests refused by the per-key rate limit', registers: [registry] });

  const connections = connectionSeries(registry);
  const replication = leaderReplicationSeries(registry);

  let source: (() => Promise<DatabaseStats>) | null = null;
  let last: DatabaseStats | null = null;
  let pending: Promise<DatabaseStats | null> | null = null;
  // One engine read serves every gauge of a scrape.
  const refresh = (): Promise<DatabaseStats | null> => {
    if (source === null) return Promise.resolve(null);
    pending ??= source().then((s) => (last = s), () => last).finally(() => { setTimeout(() => { pending = null; }, 100).unref(); });
    return pending;
  };
  const gauge = (name: string, help: string, read: (s: DatabaseStats) => number): void => {
    new Gauge({
      name, help, registers: [registry],
      async collect() { const s = await refresh(); this.set(s === null ? 0 : read(s)); },
    });
  };
  gauge('svc_collections', 'Collections in the database', (s) => s.collections);
  gauge('svc_points', 'Points in all collections', (s) => s.total_points);
  gauge('svc_collections_stale', 'Collections whose index is stale (a rebuild pending or running)', (s) => s.per_collection.filter((c) => c.index_state === 'stale').length);
  gauge('svc_vector_bytes', 'Bytes of vectors in memory, all collections', (s) => s.per_collection.reduce((n, c) => n + c.vector_bytes, 0));
  gauge('svc_graph_bytes', 'Bytes of search graphs in memory, all collections', (s) => s.per_collection.reduce((n, c) => n + c.graph_bytes, 0));
  gauge('svc_disk_bytes', 'Bytes of the data directory at the last manifest', (s) => s.snapshot_status.disk_bytes);
  gauge('svc_manifest_version', 'Manifest version', (s) => s.snapshot_status.manifest_version);

  let poolSource: (() => SearchPoolStats | null) | null = null;
  new Gauge({
    name: 'svc_search_workers', help: 'Search worker threads alive (SVC_SEARCH_WORKERS)', registers: [registry],
    collect() { this.set(poolSource?.()?.workers ?? 0); },
  });
  // Counters the pool keeps itself, brought up to its figures at each scrape.
  const poolCounter = (name: string, help: string, read: (s: SearchPoolStats) => number): void => {
    sourcedCounter(registry, name, help, () => {
      const s = poolSource?.();
      return s ? { '': read(s) } : null;
    });
  };
  poolCounter('svc_search_worker_searches_total', 'Dense searches a search worker answered', (s) => s.dispatched);
  poolCounter('svc_search_worker_overflow_total', 'Dense searches run on the event loop because every worker was full', (s) => s.overflow);
  poolCounter('svc_search_worker_fallbacks_total', 'Dense searches answered on the event loop because their worker died', (s) => s.fallbacks);
  // A worker that dies is replaced, within a bound (search-pool.ts): deaths less replacements are those left dead.
  poolCounter('svc_search_worker_deaths_total', 'Search workers that ended outside shutdown (crashed, exited, terminated)', (s) => s.deaths ?? 0);
  poolCounter('svc_search_worker_replaced_total', 'Search workers started in place of one that ended', (s) => s.replaced ?? 0);
  // The bounded queue in front of the workers (issue 20): searches wait for a slot, and past the bound are refused.
  new Gauge({
    name: 'svc_search_queue_waiting', help: 'Dense searches waiting now for a search worker slot', registers: [registry],
    collect() { this.set(poolSource?.()?.waiting ?? 0); },
  });
  new Gauge({
    name: 'svc_search_worker_in_flight', help: 'Dense searches a search worker holds now', registers: [registry],
    collect() { this.set(poolSource?.()?.inFlight ?? 0); },
  });
  poolCounter('svc_search_queue_waited_total', 'Dense searches that waited for a search worker slot before running', (s) => s.waited ?? 0);
  poolCounter('svc_search_queue_rejected_total', 'Dense searches refused with rate_limited because the queue of waiting searches was full', (s) => s.rejected ?? 0);

  let replicationSource: (() => FollowerStats) | null = null;
  followerReplicationSeries(registry, () => replicationSource?.() ?? null);

  return {
    registry,
    setStatsSource(s) { source = s; },
    setSearchPoolSource(s) { poolSource = s; },
    setReplicationSource(s) { replicationSource = s; },
    setConsensusSource(s) { consensusSeries(registry, s); },
    requestFinished(l, status, seconds) {
      record(seriesOf(l), status, seconds);
    },
    recorder(l) {
      const x = seriesOf(l);
      return (status, seconds) => record(x, status, seconds);
    },
    authFailure() { authFailures.inc(); },
    rateLimited() { rateLimited.inc(); },
    ...connections,
    ...replication,
  };
}

/**
 * svc_replication_followers (Replicate streams open now) and svc_replication_bytes_streamed_total (record
 * bytes they sent): counted per event in plain numbers, shown at scrape.
 */
function leaderReplicationSeries(registry: Registry): Required<Pick<Metrics, 'replicationFollowers' | 'replicationBytesStreamed'>> {
  let followers = 0;
  let bytes = 0;
  new Gauge({
    name: 'svc_replication_followers', help: 'Replicate streams connected to this leader', registers: [registry],
    collect() { this.set(followers); },
  });
  let shown = 0;
  new Counter({
    name: 'svc_replication_bytes_streamed_total', help: 'Bytes of replication records sent to followers', registers: [registry],
    collect() {
      if (bytes > shown) this.inc(bytes - shown);
      shown = bytes;
    },
  });
  return {
    replicationFollowers(delta) { followers += delta; },
    replicationBytesStreamed(n) { bytes += n; },
  };
}

const FOLLOWER_STATES = ['starting', 'bootstrapping', 'streaming', 'stopped'] as const;

/**
 * A read replica's replication, read at scrape time (all zero on a leader): its state (one series per
 * state, 1 for the current one), the leader seq applied, how far it is behind what it has received
 * (records, and seconds the oldest of them has waited), reconnects and bootstraps.
 */
function followerReplicationSeries(registry: Registry, read: () => FollowerStats | null): void {
  new Gauge({
    name: 'svc_replication_state', help: 'Follower state: 1 for the current one (starting, bootstrapping, streaming, stopped)',
    labelNames: ['state'] as const, registers: [registry],
    collect() {
      const s = read();
      for (const state of FOLLOWER_STATES) this.set({ state }, s?.state === state ? 1 : 0);
    },
  });
  const gauge = (name: string, help: string, value: (s: FollowerStats) => number): void => {
    new Gauge({ name, help, registers: [registry], collect() { const s = read(); this.set(s === null ? 0 : value(s)); } });
  };
  gauge('svc_replication_applied_seq', 'Leader commit seq applied and durable on this follower', (s) => s.appliedSeq ?? 0);
  gauge('svc_replication_lag_records', 'Leader commit seqs past the one applied here (by the leader\'s last heartbeat or record)',
    (s) => Math.max(0, (s.leaderSeq ?? s.receivedSeq ?? 0) - (s.appliedSeq ?? 0)));
  gauge('svc_replication_lag_seconds', 'How stale this replica may be: 0 while it holds every leader commit it has heard of, else the time '
    + 'since it last held all its leader had (grows while the stream is down or behind)', (s) => s.lagMs / 1000);
  const counter = (name: string, help: string, value: (s: FollowerStats) => number): void => {
    sourcedCounter(registry, name, help, () => {
      const s = read();
      return s === null ? null : { '': value(s) };
    });
  };
  counter('svc_replication_reconnects_total', 'Times this follower reconnected to its leader', (s) => s.reconnects);
  counter('svc_replication_bootstraps_total', 'Full logical snapshots this follower applied (the first, and each re-bootstrap)', (s) => s.bootstraps);
}

/**
 * A consensus member's series (docs/consensus.md): its role, term and indexes, and the transport's and
 * forwarder's counters, read at scrape time. Registered only on a member.
 */
function consensusSeries(registry: Registry, read: () => ConsensusMetricsSource): void {
  new Gauge({
    name: 'svc_raft_role', help: 'This consensus member\'s role: 1 for the current one (leader, follower, candidate)',
    labelNames: ['role'] as const, registers: [registry],
    collect() {
      const r = read().role;
      for (const role of ['leader', 'follower', 'candidate'] as const) this.set({ role }, r === role ? 1 : 0);
    },
  });
  const gauge = (name: string, help: string, value: (s: ConsensusMetricsSource) => number): void => {
    new Gauge({ name, help, registers: [registry], collect() { this.set(value(read())); } });
  };
  gauge('svc_raft_term', 'The consensus term this member is in', (s) => s.term);
  gauge('svc_raft_commit_index', 'The last log index this member knows a quorum holds', (s) => s.commitIndex);
  gauge('svc_raft_applied_index', 'The last log index this member has applied to its data', (s) => s.appliedIndex);
  gauge('svc_raft_snapshot_index', 'The log index of this member\'s last snapshot (the log before it is compacted)', (s) => s.snapshotIndex);
  const counter = (name: string, help: string, labels: string[], values: (s: ConsensusMetricsSource) => Record<string, number>): void => {
    sourcedCounter(registry, name, help, () => values(read()), labels[0]);
  };
  counter('svc_raft_messages_sent_total', 'Consensus messages this member sent to its peers', [], (s) => ({ '': s.transport.messagesSent }));
  counter('svc_raft_messages_received_total', 'Consensus messages this member received from its peers', [], (s) => ({ '': s.transport.messagesReceived }));
  counter('svc_raft_bytes_sent_total', 'Bytes of consensus frames this member sent', [], (s) => ({ '': s.transport.bytesSent }));
  counter('svc_raft_leader_gone_total', 'Times this member ended its leader\'s lease early: the leader\'s address refused connections (its process was gone) and it missed a heartbeat', [], (s) => ({ '': s.leaderGone }));
  counter('svc_raft_reconnects_total', 'Times this member dialled a peer again after losing its connection', [], (s) => ({ '': s.transport.reconnects }));
  counter('svc_raft_hung_connections_total', 'Connections to a peer this member closed because they hung (no answer to its pings for 10 s) and dialled again', [], (s) => ({ '': s.transport.deadLinks }));
  counter('svc_raft_dropped_total', 'Consensus messages dropped before sending (a full queue, a peer not connected, too large): Raft sends again',
    ['reason'], (s) => snakeKeys(s.transport.dropped));
  counter('svc_raft_rejected_total', 'Inbound consensus connections closed for what they sent (malformed, oversize, auth, tls, ...)',
    ['reason'], (s) => snakeKeys(s.transport.rejected));
  counter('svc_raft_forwarded_writes_total', 'Writes this member forwarded to its leader', [], (s) => ({ '': s.forward.forwarded }));
  counter('svc_raft_forward_served_total', 'Writes followers forwarded to this member while it led', [], (s) => ({ '': s.forward.served }));
  counter('svc_raft_snapshot_streams_total', 'Database images streamed to a member behind the log (sent, failed), not started because it reads no format this member sends (refused), or received whole from a leader (received)',
    ['outcome'], (s) => ({ sent: s.snapshots.sent, failed: s.snapshots.failed, refused: s.snapshots.refused, received: s.snapshots.received }));
  counter('svc_raft_snapshot_bytes_sent_total', 'Bytes of database images this member streamed whole to members behind the log', [], (s) => ({ '': s.snapshots.bytesSent }));
  counter('svc_raft_snapshot_stream_resumes_total', 'Times an image stream whose connection broke went on from the first chunk its member did not hold, not from the beginning', [], (s) => ({ '': s.snapshots.resumed }));
  counter('svc_raft_snapshot_chunks_resent_total', 'Chunks of image streams sent again after a resume (those the member did not hold)', [], (s) => ({ '': s.snapshots.chunksResent }));
}

/**
 * A counter showing figures its source keeps itself (one per value of `label`, or one figure under ''),
 * brought up to them at each scrape; a source answering null leaves it as it stands. A labelled series
 * is shown from zero.
 */
function sourcedCounter(registry: Registry, name: string, help: string, read: () => Record<string, number> | null, label?: string): void {
  const seen = new Map<string, number>();
  new Counter({
    name, help, labelNames: label === undefined ? [] : [label], registers: [registry],
    collect() {
      const figures = read();
      if (figures === null) return;
      for (const [k, now] of Object.entries(figures)) {
        const before = seen.get(k) ?? 0;
        if (label !== undefined) this.inc({ [label]: k }, Math.max(0, now - before));
        else if (now > before) this.inc(now - before);
        seen.set(k, now);
      }
    },
  });
}

/** queueFull -> queue_full: label values in the style of the other series. */
function snakeKeys(o: Readonly<Record<string, number>>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v]));
}

/**
 * svc_connections_open{transport} and svc_connections_refused_total{transport,reason}: per listener, the
 * connections open now, and those the server closed or refused (roles/connection-limits.ts: `limit`,
 * `timeout`, `unread_body`). Counted in plain numbers (per connection, not per request) and shown at scrape.
 */
function connectionSeries(registry: Registry): ConnectionMetrics {
  const open: Record<ConnectionTransport, number> = { rest: 0, grpc: 0 };
  const refused = new Counter({
    name: 'svc_connections_refused_total', help: 'Connections (or HTTP/2 streams) closed by the server: refused at the cap, timed out, or answered before their body was read',
    labelNames: ['transport', 'reason'] as const, registers: [registry],
  });
  // Every series from zero, so a scrape shows the families before the first refusal.
  for (const transport of ['rest', 'grpc'] as const) for (const reason of ['limit', 'timeout', 'unread_body'] as const) refused.inc({ transport, reason }, 0);
  new Gauge({
    name: 'svc_connections_open', help: 'Connections open on the listener', labelNames: ['transport'] as const, registers: [registry],
    collect() {
      for (const t of ['rest', 'grpc'] as const) this.set({ transport: t }, open[t]);
    },
  });
  return {
    connectionOpened(t) { open[t]++; },
    connectionClosed(t) { open[t]--; },
    connectionRefused(t: ConnectionTransport, reason: RefusalReason) { refused.inc({ transport: t, reason }); },
  };
}

const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10] as const;

/**
 * One method and route template's requests, counted in plain numbers: prom-client's own inc and observe
 * cost about 6 µs a request inside a server's request handling (measured with h2load, 8 clients), a
 * tenth of what the event loop spends on a small query. They become prom-client series at scrape time.
 */
interface HttpSeries {
  labels: RequestLabels;
  requests: number;
  errors: number;
  sum: number;
  /** Requests per duration bucket, not cumulative; the last is above the largest bound (+Inf). */
  perBucket: Float64Array;
  /** What the counters were last brought up to. */
  shown: { requests: number; errors: number };
}

function newSeries(l: RequestLabels): HttpSeries {
  return {
    labels: { method: l.method, route: l.route }, requests: 0, errors: 0, sum: 0,
    perBucket: new Float64Array(DURATION_BUCKETS.length + 1), shown: { requests: 0, errors: 0 },
  };
}

function record(x: HttpSeries, status: number, seconds: number): void {
  x.requests++;
  if (status >= 400) x.errors++;
  x.sum += seconds;
  let i = 0;
  while (i < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[i]) i++;
  x.perBucket[i]++;
}

/** svc_http_requests_total, svc_http_request_errors_total and svc_http_request_duration_seconds over `series`. */
function registerHttpSeries(registry: Registry, series: Map<string, HttpSeries>): void {
  const labelNames = ['method', 'route'] as const;
  const counter = (name: string, help: string, field: 'requests' | 'errors'): void => {
    new Counter({
      name, help, labelNames, registers: [registry],
      collect() {
        for (const x of series.values()) {
          if (x[field] > x.shown[field]) this.inc(x.labels, x[field] - x.shown[field]);
          x.shown[field] = x[field];
        }
      },
    });
  };
  counter('svc_http_requests_total', 'HTTP requests by method and route template', 'requests');
  counter('svc_http_request_errors_total', 'HTTP responses with status >= 400', 'errors');
  // prom-client's Histogram takes observations one at a time only; this is the same family built from
  // the counts, in the shape prom-client's registry formats (and aggregates) its own histograms.
  const name = 'svc_http_request_duration_seconds';
  const help = 'HTTP request duration';
  const histogram = {
    name, help, type: 'histogram', aggregator: 'sum',
    get() {
      const values: { metricName: string; labels: Readonly<Record<string, string | number>>; value: number }[] = [];
      for (const x of series.values()) {
        let cumulative = 0;
        for (let i = 0; i <= DURATION_BUCKETS.length; i++) {
          cumulative += x.perBucket[i];
          values.push({ metricName: `${name}_bucket`, labels: { le: i < DURATION_BUCKETS.length ? DURATION_BUCKETS[i] : '+Inf', ...x.labels }, value: cumulative });
        }
        values.push({ metricName: `${name}_sum`, labels: { ...x.labels }, value: x.sum });
        values.push({ metricName: `${name}_count`, labels: { ...x.labels }, value: x.requests });
      }
      return Promise.resolve({ name, help, type: 'histogram', aggregator: 'sum', values });
    },
    // Registry.resetMetrics: every figure of every series from zero, the counters' (reset beside it) too.
    reset() {
      for (const x of series.values()) {
        x.requests = 0;
        x.errors = 0;
        x.sum = 0;
        x.perBucket.fill(0);
        x.shown = { requests: 0, errors: 0 };
      }
    },
  };
  registry.registerMetric(histogram as unknown as Metric);
}
