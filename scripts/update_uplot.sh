#!/usr/bin/env bash
# Vendor uPlot (https://github.com/leeoniya/uPlot, MIT) into the chart page's static files,
# from the npm registry by version: scripts/update_uplot.sh 1.6.32
#
# The page loads these files from the server itself (no CDN: it works offline, and the
# server's Content-Security-Policy admits only its own origin). Writes
# src/trainreport/server/static/vendor/uplot/{uPlot.iife.min.js,uPlot.min.css,LICENSE,VERSION}.
set -euo pipefail
if [ $# -ne 1 ] || [[ ! "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "usage: $0 VERSION   (e.g. $0 1.6.32; see: npm view uplot versions)" >&2
    exit 2
fi
version=$1
cd "$(dirname "$0")/.."
dest=src/trainreport/server/static/vendor/uplot
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "uplot@$version" >/dev/null && tar xzf "uplot-$version.tgz")
packed=$(node -p "require('$work/package/package.json').version")
if [ "$packed" != "$version" ]; then
    echo "npm packed uplot $packed, not $version" >&2
    exit 1
fi
mkdir -p "$dest"
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" \
    "$work/package/LICENSE" "$dest/"
echo "$version" >"$dest/VERSION"
echo "vendored uplot $version into $dest:"
(cd "$dest" && sha256sum uPlot.iife.min.js uPlot.min.css LICENSE)
