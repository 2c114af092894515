'use strict';
// Usage: node ons_send.js NAMESRV_ADDR TOPIC BODY
//
// Sends one message with an ali-ons Producer: the producer gets the topic's route
// from the NameServer, picks a queue and sends SEND_MESSAGE_V2 (310) to the broker
// address in that route. Prints the SendResult as one JSON line. Exit 0 on a
// result, 2 on an error, 3 when the watchdog fires.
const { Producer, Message } = require('ali-ons');

const TIMEOUT_MS = Number(process.env.ONS_TIMEOUT_MS || 3000);
const quiet = { info() {}, debug() {}, warn() {}, error(...a) { console.error(...a); } };

const watchdog = setTimeout(() => {
  console.error(`ons_send: no result after ${2 * TIMEOUT_MS + 2000} ms`);
  process.exit(3);
}, 2 * TIMEOUT_MS + 2000);

async function main() {
  const [addr, topic, body] = process.argv.slice(2);
  if (!addr || !topic) throw new Error('usage: ons_send.js NAMESRV_ADDR TOPIC BODY');
  const producer = new Producer({
    nameSrv: addr,
    httpclient: {},
    logger: quiet,
    producerGroup: 'PID_RMQ_INTEROP',
    instanceName: 'rmq-interop',
    responseTimeout: TIMEOUT_MS,
    sendMsgTimeout: TIMEOUT_MS,
    retryTimesWhenSendFailed: 0,
    // No background polling during the run.
    pollNameServerInteval: 600000,
    heartbeatBrokerInterval: 600000,
    persistConsumerOffsetInterval: 600000,
    rebalanceInterval: 600000,
  });
  producer.on('error', err => console.error('ons_send: producer error:', err.message));
  await producer.ready();
  const msg = new Message(topic, 'TagA', body || 'hello');
  msg.keys = [ 'interop-key' ];   // keys must be an array
  const result = await producer.send(msg);
  console.log(JSON.stringify(result));
}

main().then(() => {
  clearTimeout(watchdog);
  // The client keeps an inner producer and timers alive; close() would not end them.
  process.exit(0);
}, err => {
  console.error('ons_send:', err && err.stack || err);
  console.log(JSON.stringify({ error: { name: err.name, code: err.code, message: err.message } }));
  process.exit(2);
});
