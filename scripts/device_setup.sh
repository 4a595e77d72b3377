# Source this on the GPU machine: installs the carried wheels (.whl/) into /tmp/site. XLGEN_CACHE: yours where set
# (a carried cache of precompiled cubins, scripts/precompile_cubins.py), else /tmp/xlgen-cache.
rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD && export PYTHONUNBUFFERED=1 && export XLGEN_CACHE=${XLGEN_CACHE:-/tmp/xlgen-cache}
