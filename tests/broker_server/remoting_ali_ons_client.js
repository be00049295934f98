'use strict';
// One scenario of ali-ons (npm, a pure JavaScript RocketMQ 4.x client) against a remoting address:
// node remoting_ali_ons_client.js '<scenario JSON>' prints one JSON line of results.
const { Producer, Consumer, Message } = require('ali-ons');

const httpclient = {};   // ali-ons asks an HTTP address server only without nameSrv
const scenario = JSON.parse(process.argv[2]);
const common = {
  httpclient, nameSrv: scenario.address, accessKeyId: scenario.access_key || 'none',
  accessKeySecret: scenario.secret_key || 'none',
};

async function produce() {
  const producer = new Producer({ ...common, producerGroup: scenario.group });
  await producer.ready();
  const sent = [];
  for (const spec of scenario.messages) {
    const message = new Message(scenario.topic, spec.tags || '', spec.body);
    if (spec.keys) message.keys = [ spec.keys ];
    for (const [ name, value ] of Object.entries(spec.properties || {})) message.properties[name] = value;
    const result = await producer.send(message);
    sent.push({ status: result.sendStatus, msg_id: result.msgId });
  }
  await producer.close();
  return { sent, ok: sent.every(r => r.status === 'SEND_OK') };
}

async function consume() {
  const consumer = new Consumer({ ...common, consumerGroup: scenario.group, pullTimeDelayMillsWhenException: 100 });
  const received = [];
  const failed = new Set();
  let done;
  const finished = new Promise(resolve => { done = resolve; });
  consumer.subscribe(scenario.topic, '*', async message => {
    const keys = Array.isArray(message.keys) ? message.keys.join(' ') : (message.keys || '');
    if (keys && keys === scenario.fail_once_key && !failed.has(keys)) {
      failed.add(keys);
      return Consumer.ACTION_RETRY;
    }
    received.push({ id: message.msgId, topic: message.topic, tags: message.tags, keys,
      body: message.body.toString(), reconsume_times: message.reconsumeTimes,
      color: message.properties.color || '' });
    if (received.length >= scenario.expect) done();
  });
  consumer.on('error', err => process.stderr.write(`consumer error: ${err}\n`));
  await Promise.race([ finished, new Promise(resolve => setTimeout(resolve, (scenario.timeout_s || 60) * 1000)) ]);
  await consumer.close();
  return { received };
}

(scenario.do === 'produce' ? produce() : consume()).then(result => {
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(0);
}, err => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
