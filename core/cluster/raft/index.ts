/** Raft as a pure state machine (issue 17): the host persists, sends, applies and ticks. */
export { RaftNode, type FollowerProgress, type Ready, type RaftStatus, type SoftState } from './node.js';
export { RAFT_DEFAULTS, type ProposeResult, type RaftOptions, type ReadIndexResult } from './raft.js';
export { formatEntries, formatEntry, formatMessage } from './format.js';
export { MemoryStorage, type Storage } from './storage.js';
export type { MessageHandler, Transport } from './transport.js';
export { majority, quorumValue, voteResult, type VoteResult } from './quorum.js';
export * from './types.js';
