"""Dashboards for a bookiesim cluster: one list of panels (:mod:`.panels`) rendered as a Grafana
dashboard (:mod:`.grafana`) and as a Prometheus console page (:mod:`.consoles`). Pure
rendering: the Prometheus server that shows them is :mod:`bookiesim.cluster.prometheus`, the
``bookiesim dashboards`` command (render, check against a live Prometheus) is
:mod:`bookiesim.cli.dashboards_command`."""
