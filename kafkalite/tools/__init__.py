"""Tools that also run on their own, outside the ``kafkalite`` command's
package (kafkalite/cli/):

- dump_log.py and verify.py: operator tools that read a data directory
  without changing it; ``kafkalite dump-log`` and ``kafkalite verify`` (they
  have a command module's shape), and the repository's tools/dump-log and
  tools/verify-data-dir scripts (their ``main``);
- gen_docs.py: writes docs/configuration.md and docs/cli.md from the code
  (a developer tool: nothing in the product imports it);
- dev_certs.py: throwaway TLS certificates for tests and benchmarks.

Entry points, as cli/ is: they may import anything, and only another entry
point (or a test) imports them."""
