"""Dashboards for a bookiesim cluster: one list of panels (:mod:`.panels`) rendered as a Grafana
dashboard (:mod:`.grafana`) and as a Prometheus console page (:mod:`.consoles`), checked
against a live Prometheus (:mod:`.check`); and a Prometheus server for a local cluster
(:mod:`.prometheus_server`)."""
