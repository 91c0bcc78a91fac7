// The image's HEALTHCHECK: GET /healthz on this container's own REST listener, exit 0 on 200, else 1.
// Liveness only (/readyz tells readiness). An image may have no curl or shell, so node asks. The address
// and TLS come from the environment the server read (SVC_REST_ADDR, SVC_TLS_CERT); a certificate is not
// verified here: the call goes to this container's own loopback and carries no key, and a certificate
// need not name localhost.
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

const addr = process.env.SVC_REST_ADDR || '127.0.0.1:6333';
const m = /^\[?(.*?)\]?:(\d+)$/.exec(addr);
if (m === null) {
  console.error(`healthcheck: SVC_REST_ADDR=${addr} is not host:port`);
  process.exit(1);
}
const host = m[1] === '0.0.0.0' || m[1] === '::' || m[1] === '' ? '127.0.0.1' : m[1];
const tls = Boolean(process.env.SVC_TLS_CERT);
const req = (tls ? httpsRequest : httpRequest)({
  host, port: Number(m[2]), path: '/healthz', method: 'GET', timeout: 4000,
  ...(tls ? { rejectUnauthorized: false } : {}),
}, (res) => {
  res.resume();
  process.exit(res.statusCode === 200 ? 0 : 1);
});
req.on('timeout', () => req.destroy(new Error('no answer within 4 s')));
req.on('error', (e) => {
  console.error(`healthcheck: ${e.message}`);
  process.exit(1);
});
req.end();
