// @kafkajs/confluent-schema-registry against kafkalite's schema registry
// (run by tests/compat/test_kafkajs.py).
//
//   node schema_registry.js <registry url> encode <subject> <avro schema> <json value>
//     registers the schema under the subject, encodes the value in
//     Confluent's wire format; prints {"id", "payload": base64}
//   node schema_registry.js <registry url> decode <base64 payload>
//     decodes a payload by the schema id it carries; prints {"value"}
//
// Exits 1 with the client's error on stderr when the registry fails it.
const { SchemaRegistry, SchemaType } = require('@kafkajs/confluent-schema-registry')

async function main () {
  const [url, op, ...args] = process.argv.slice(2)
  const registry = new SchemaRegistry({ host: url }, { forSchemaOptions: {} })
  if (op === 'encode') {
    const [subject, schema, value] = args
    const { id } = await registry.register({ type: SchemaType.AVRO, schema }, { subject })
    const payload = await registry.encode(id, JSON.parse(value))
    console.log(JSON.stringify({ id, payload: payload.toString('base64') }))
  } else if (op === 'decode') {
    const value = await registry.decode(Buffer.from(args[0], 'base64'))
    console.log(JSON.stringify({ value }))
  } else {
    throw new Error(`unknown operation ${op}`)
  }
}

main().catch((err) => {
  console.error(`schema registry client failed: ${err && err.stack ? err.stack : err}`)
  process.exit(1)
})
