class StreamsConfig: pass
class KafkaStreams: pass
