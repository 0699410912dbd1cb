// kafkajs against kafkalite's Kafka listener: a transactional producer and a
// consumer group. Run by tests/compat/test_kafkajs.py, which checks the JSON
// this prints as its last line of standard output.
//
//   node transactions.js BOOTSTRAP TOPIC PARTITIONS [--read-uncommitted]
//
// The producer (idempotent, one request in flight) commits transaction c1,
// aborts ab, commits c2, each spread over every partition; c1 and ab also
// send offsets for the group OFFSETS_GROUP (c1 commits offset 7 on partition
// 0, the aborted ab offset 99). A consumer group member then reads the topic
// from the beginning (read_committed unless --read-uncommitted) until it has
// had `expect` records and nothing more came for SETTLE_MS; it commits what it
// read and leaves. The producer commits c3; a second member of the same group
// resumes from the committed offsets and reads. The printed JSON has each
// member's values and the group offsets both groups have on the broker.
'use strict'

const { Kafka, logLevel, Partitioners } = require('kafkajs')

const [bootstrap, topic, partitionsArg, flag] = process.argv.slice(2)
const partitions = Number(partitionsArg)
const readUncommitted = flag === '--read-uncommitted'
const PER_TXN = 12
const SETTLE_MS = 500
const DEADLINE_MS = 25000
const GROUP = `${topic}-readers`
const OFFSETS_GROUP = `${topic}-txn-offsets`

const kafka = new Kafka({
  clientId: 'kafkalite-compat',
  brokers: [bootstrap],
  logLevel: logLevel.WARN,
  connectionTimeout: 5000,
  requestTimeout: 10000,
})

function messages(tag) {
  return Array.from({ length: PER_TXN }, (_, i) => ({
    key: `k${i}`, value: `${tag}-${i}`, partition: i % partitions,
  }))
}

async function transaction(producer, tag, commit, offset) {
  const txn = await producer.transaction()
  try {
    await txn.send({ topic, messages: messages(tag) })
    if (offset !== undefined) {
      await txn.sendOffsets({
        consumerGroupId: OFFSETS_GROUP,
        topics: [{ topic, partitions: [{ partition: 0, offset: String(offset) }] }],
      })
    }
  } catch (e) {
    await txn.abort()
    throw e
  }
  await (commit ? txn.commit() : txn.abort())
}

// One member of GROUP reads until it has `expect` records and SETTLE_MS pass
// with nothing new (so records it should not see have time to arrive too).
async function readAsGroupMember(expect) {
  const consumer = kafka.consumer({
    groupId: GROUP, readUncommitted, sessionTimeout: 10000, heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
  })
  const values = []
  let last = Date.now()
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        values.push({ partition, offset: Number(message.offset), value: message.value.toString() })
        last = Date.now()
      },
    })
    const start = Date.now()
    while (Date.now() - start < DEADLINE_MS &&
           !(values.length >= expect && Date.now() - last >= SETTLE_MS)) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  } finally {
    await consumer.disconnect()   // commits the offsets of what eachMessage took
  }
  return values
}

async function main() {
  const producer = kafka.producer({
    transactionalId: `${topic}-kafkajs`, idempotent: true, maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner,
  })
  await producer.connect()
  const admin = kafka.admin()
  await admin.connect()
  try {
    await transaction(producer, 'c1', true, 7)
    await transaction(producer, 'ab', false, 99)
    await transaction(producer, 'c2', true)
    const first = await readAsGroupMember(2 * PER_TXN)
    await transaction(producer, 'c3', true)
    const second = await readAsGroupMember(PER_TXN)
    const offsets = async (groupId) => (await admin.fetchOffsets({ groupId, topics: [topic] }))[0]
      .partitions.map(({ partition, offset }) => ({ partition, offset: Number(offset) }))
      .sort((a, b) => a.partition - b.partition)
    console.log(JSON.stringify({
      first, second, groupOffsets: await offsets(GROUP), txnOffsets: await offsets(OFFSETS_GROUP),
    }))
  } finally {
    await admin.disconnect()
    await producer.disconnect()
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e)
  process.exit(1)
})
