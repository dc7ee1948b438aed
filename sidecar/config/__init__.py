"""The settings of every ``actonce`` command, each declared once.

``serve``'s are the fields of :class:`Config` (:mod:`sidecar.config.serve`); the other
commands' are tables in :mod:`sidecar.config.commands`; each is a :class:`Setting`
(:mod:`sidecar.config.setting`) whose value parsers are in :mod:`sidecar.config.values`.
"""

from sidecar.config.serve import Config, embedded_store_file, without_password
from sidecar.config.setting import Setting, settings_of

__all__ = ["Config", "Setting", "embedded_store_file", "settings_of", "without_password"]
