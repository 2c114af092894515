'use strict';
// Usage: node ons_route.js NAMESRV_ADDR TOPIC [TOPIC ...]
//
// Asks the NameServer for the route of every TOPIC with ali-ons' own
// MQClientAPI.getTopicRouteInfoFromNameServer, all at once on one connection
// (ali-ons multiplexes requests by opaque). Prints one JSON line:
//   [{"topic": T, "ok": true, "route": {...}} | {"topic": T, "ok": false,
//     "error": {"name", "code", "message"}}, ...]
// Exit 0 when every answer arrived (a route or an error code), 2 on a crash,
// 3 when the watchdog fires.
const MQClientAPI = require('ali-ons/lib/mq_client_api');

const TIMEOUT_MS = Number(process.env.ONS_TIMEOUT_MS || 3000);
const quiet = { info() {}, debug() {}, warn() {}, error(...a) { console.error(...a); } };

const watchdog = setTimeout(() => {
  console.error(`ons_route: no result after ${2 * TIMEOUT_MS + 2000} ms`);
  process.exit(3);
}, 2 * TIMEOUT_MS + 2000);

async function main() {
  const [addr, ...topics] = process.argv.slice(2);
  if (!addr || !topics.length) throw new Error('usage: ons_route.js NAMESRV_ADDR TOPIC...');
  // ali-ons 3.12 reads the NameServer address from `nameSrv` (`onsAddr` would be an
  // HTTP lookup through `httpclient`, which must be present but is unused here).
  const api = new MQClientAPI({
    nameSrv: addr, httpclient: {}, logger: quiet, responseTimeout: TIMEOUT_MS,
  });
  api.on('error', err => console.error('ons_route: client error:', err.message));
  await api.ready();
  const results = await Promise.all(topics.map(topic =>
    api.getTopicRouteInfoFromNameServer(topic, TIMEOUT_MS).then(
      route => ({ topic, ok: true, route }),
      err => ({ topic, ok: false, error: { name: err.name, code: err.code, message: err.message } }))));
  console.log(JSON.stringify(results));
  await api.close();
}

main().then(() => {
  clearTimeout(watchdog);
  process.exit(0);
}, err => {
  console.error('ons_route:', err && err.stack || err);
  process.exit(2);
});
