"""The canary training harness of ``miaudit dp-audit`` (torch); the pure bounds it feeds live in
:mod:`miaudit.privacy`."""
