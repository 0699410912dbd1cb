from __future__ import annotations

from kafkalite import errors

# Transaction states (the producer's side of them)
_UNINITIALIZED, _READY, _IN_TXN, _FATAL = "uninitialized", "ready", "in transaction", "fatal"
# CONCURRENT_TRANSACTIONS mostly means the previous transaction's markers
# are still being written (a millisecond or two here): ask again after this,
# doubling up to retry.backoff.ms (Kafka's producer uses 20 ms).
SHORT_TXN_BACKOFF_S = 0.002
# Transactions v2 (KIP-890 part 2): the request versions that speak it
TXN_V2_PRODUCE_VERSION = 12
TXN_V2_END_TXN_VERSION = 5
TXN_V2_OFFSET_COMMIT_VERSION = 5
# Coordinator answers that mean "ask again shortly"
_TXN_RETRIABLE = {errors.ConcurrentTransactionsError.code, errors.CoordinatorLoadInProgressError.code,
                  errors.CoordinatorNotAvailableError.code, errors.NotCoordinatorError.code,
                  errors.RequestTimedOutError.code}
_FENCED = {errors.ProducerFencedError.code, errors.InvalidProducerEpochError.code,
           errors.TransactionalIdAuthorizationFailedError.code}
