# Sourced by the scripts of gpu/: the Python a GPU image has, plus the wheels carried in ./.whl
# (SQLAlchemy is the one such an image usually lacks), installed into a scratch folder, and this
# checkout's src/ first on the path. Needs ROOT (the checkout), WORK (a scratch folder) and PY.
#
#   source "$ROOT/gpu/_pyenv.sh"; rankmap_pyenv sqlalchemy numpy || exit 100
#
# rankmap_pyenv MODULE...  installs the wheels, sets PYTHONPATH, and returns 100 after one FAIL
# line when a MODULE cannot be imported.
rankmap_pyenv() {
  if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
      "$ROOT"/.whl/*.whl > "$WORK/pip.log" 2>&1 || { echo "FAIL installing the wheels of .whl:"; tail -5 "$WORK/pip.log"; return 100; }
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
  # byte-compiled as `pip install` leaves a package (the wheels above are unpacked with --no-compile,
  # and a machine with PYTHONDONTWRITEBYTECODE set would compile them again in every run)
  $PY -m compileall -q -j 0 "$ROOT/src" "$WORK/site" > /dev/null 2>&1
  local missing
  missing=$($PY -c 'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if not u.find_spec(m)))' "$@")
  if [ -n "$missing" ]; then
    echo "FAIL python3 lacks: $missing (carry their wheels in .whl: see gpu/_pyenv.sh)"; return 100
  fi
}
