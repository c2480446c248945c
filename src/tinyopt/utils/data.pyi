# ``tinyopt.utils.data`` is ``tinyopt.data`` itself at run time (see ``tinyopt/utils``); this stub
# tells type checkers so.
from tinyopt.data import *  # noqa: F403
