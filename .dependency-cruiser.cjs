/** Imports point down only: base <- crypto/storage/index/text <- query <- collection <- service <- roles. */
module.exports = {
  forbidden: [
    { name: 'core-not-roles', severity: 'error', comment: 'the engine knows nothing of transports or config',
      from: { path: '^core/' }, to: { path: '^roles/' } },
    { name: 'raft-only-base', severity: 'error', comment: 'raft is a pure state machine: it owns its Storage and Transport',
      from: { path: '^core/cluster/raft/' }, to: { path: '^core/', pathNot: '^core/(base|cluster/raft)/' } },
    { name: 'base-is-the-bottom', severity: 'error',
      from: { path: '^core/base/' }, to: { path: '^core/', pathNot: '^core/base/' } },
    { name: 'low-layers-stay-low', severity: 'error', comment: 'crypto, storage, index, text do not reach up',
      from: { path: '^core/(crypto|storage|index|text|quantization)/' },
      to: { path: '^core/(query|collection|service|providers|cluster)/' } },
    { name: 'query-below-collection', severity: 'error',
      from: { path: '^core/query/' }, to: { path: '^core/(collection|service|providers|cluster)/' } },
    { name: 'collection-below-service', severity: 'error',
      from: { path: '^core/collection/' }, to: { path: '^core/service/' } },
    { name: 'no-circular', severity: 'error', from: {}, to: { circular: true } },
    { name: 'e2e-black-box', severity: 'error', comment: 'e2e tests talk over the wire only',
      from: { path: '^e2e/' }, to: { path: '^(core|roles)/' } },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '\\.test\\.ts$' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
  },
};
