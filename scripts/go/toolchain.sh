#!/usr/bin/env bash
# Sourced by the Go builds (scripts/realk8s/build.sh, scripts/helm/build.sh): puts a Go toolchain
# of at least GO_MIN on PATH. Uses the `go` already on PATH (or /usr/local/go) when it is new
# enough; otherwise fetches GO_FETCH from the Go module proxy (the toolchain zips `go` itself
# downloads, golang.org/toolchain) into ~/.cache/gputopo-go, once. No root and no apt needed.
GO_MIN=${GO_MIN:-1.26.0}
GO_FETCH=${GO_FETCH:-1.26.8}
GO_CACHE=${GO_CACHE:-$HOME/.cache/gputopo-go}

_go_new_enough() {
  local have
  have=$("$1" env GOVERSION 2>/dev/null) || return 1
  have=${have#go}
  [ "$(printf '%s\n%s\n' "$GO_MIN" "$have" | sort -V | head -n 1)" = "$GO_MIN" ]
}

ensure_go() {
  local candidate arch dir zip url
  for candidate in "$(command -v go 2>/dev/null)" /usr/local/go/bin/go "$GO_CACHE/go$GO_FETCH/bin/go"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && _go_new_enough "$candidate"; then
      PATH="$(dirname "$candidate"):$PATH"
      export PATH
      return 0
    fi
  done
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) echo "go-toolchain: no Go toolchain for $(uname -m)" >&2; return 3 ;;
  esac
  command -v curl >/dev/null && command -v unzip >/dev/null \
    || { echo "go-toolchain: go >= $GO_MIN is not installed, and curl or unzip is missing to fetch it" >&2; return 3; }
  url="${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/v0.0.1-go$GO_FETCH.linux-$arch.zip"
  dir="$GO_CACHE/go$GO_FETCH"
  zip="$GO_CACHE/go$GO_FETCH.zip.tmp"
  echo "go-toolchain: fetching go$GO_FETCH ($arch) from $url" >&2
  mkdir -p "$GO_CACHE"
  rm -rf "$dir" "$dir.tmp" "$zip"
  curl -fsSL --retry 3 -o "$zip" "$url" \
    || { echo "go-toolchain: could not fetch $url" >&2; rm -f "$zip"; return 3; }
  unzip -q "$zip" -d "$dir.tmp" || { echo "go-toolchain: $zip is not a zip" >&2; return 3; }
  mv "$dir.tmp/golang.org/toolchain@v0.0.1-go$GO_FETCH.linux-$arch" "$dir"
  rm -rf "$dir.tmp" "$zip"
  chmod -R u+x "$dir/bin" "$dir/pkg/tool"
  _go_new_enough "$dir/bin/go" || { echo "go-toolchain: $dir/bin/go does not run" >&2; return 3; }
  PATH="$dir/bin:$PATH"
  export PATH
}
