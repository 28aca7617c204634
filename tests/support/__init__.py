"""What the tests share: daemons, configs, sysfs trees, models built on the fly and waits.

Why a package: a test module holds tests and its own small helpers; anything a second
module needs lives here, so no test module imports another (pytest puts ``tests/`` on
``sys.path``, hence ``from support.configs import digits_config``). One job per module:

* ``paths`` — the checkout and its shipped models;
* ``daemons`` — the real daemon in a subprocess (``edged.testing.harness``), metrics scraping;
* ``configs`` — TOML configs: model and variant tables, the digits and person configs;
* ``waits`` — waiting for a condition instead of sleeping a fixed time;
* ``governor`` — level tables, status helpers and load for governor tests;
* ``ort`` — one cached ONNX Runtime session per model file;
* ``person`` — the person detector's photos, true boxes and preprocessing;
* ``faults`` — broken artifacts and a model wrong at run time;
* ``slow_model`` — a real ONNX model busy for a known while;
* ``frigate_graphs`` — small graphs in each Frigate ``model_type``'s layout;
* ``sysfs`` — sysfs trees in the kernel's formats;
* ``notify_socket``, ``systemd_ns``, ``ns_client`` — systemd's notify socket, a real
  systemd in namespaces, and the client run inside them.
"""
