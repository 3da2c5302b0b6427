"""ACL 1.0 (upstream's "plain" access control): accounts in YAML files, signed requests, per-resource rights."""
