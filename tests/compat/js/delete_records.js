// kafkajs's admin.deleteTopicRecords against kafkalite's Kafka listener. Run
// by tests/compat/test_delete_records_clients.py, which checks the JSON this prints
// as its last line of standard output.
//
//   node delete_records.js BOOTSTRAP TOPIC
//
// TOPIC has two partitions with records in both: this deletes partition 0's
// before offset 4 and all of partition 1's (offset -1: up to the high
// watermark), prints the offsets fetchTopicOffsets sees then, the first
// offset a consumer reading from the beginning gets on each partition, and
// the error an offset above the high watermark gets.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'kafkalite-compat', brokers: [bootstrap],
  logLevel: logLevel.NOTHING, retry: { retries: 2 } })

async function main() {
  const admin = kafka.admin()
  await admin.connect()
  const out = {}
  try {
    // kafkajs's deleteTopicRecords finds leaders in its cached metadata
    // only (KafkaJSTopicMetadataNotLoaded otherwise): load it first
    await admin.fetchTopicMetadata({ topics: [topic] })
    await admin.deleteTopicRecords({ topic, partitions: [
      { partition: 0, offset: '4' }, { partition: 1, offset: '-1' }] })
    out.offsets = (await admin.fetchTopicOffsets(topic))
      .map(p => ({ partition: p.partition, low: Number(p.low), high: Number(p.high) }))
      .sort((a, b) => a.partition - b.partition)
    try {
      await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '1000' }] })
      out.aboveHighWatermark = 'no error'
    } catch (e) {
      // kafkajs wraps the broker's per-partition errors once it gives up
      const err = e.partitions ? e : (e.originalError || e.cause || e)
      out.aboveHighWatermark = err.partitions ? err.partitions.map(p => p.error.type)
        : [`${e.name}: ${e.message}`]
    }
  } finally {
    await admin.disconnect()
  }
  const consumer = kafka.consumer({ groupId: `${topic}-reader`, maxWaitTimeInMs: 200 })
  await consumer.connect()
  const first = {}
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({ eachMessage: async ({ partition, message }) => {
    if (!(partition in first)) first[partition] = Number(message.offset)
  } })
  const deadline = Date.now() + 20000
  while (!(0 in first) && Date.now() < deadline) await new Promise(r => setTimeout(r, 100))
  await consumer.disconnect()
  out.firstRead = first
  console.log(JSON.stringify(out))
}

main().catch(e => { console.error(e); process.exit(1) })
