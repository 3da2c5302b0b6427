"""The embedded name server: routes, broker registrations and KV config, served on its own port."""
