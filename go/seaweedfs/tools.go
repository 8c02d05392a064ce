//go:build tools

// Package tools pins SeaweedFS (Apache-2.0), the S3-compatible server that honours
// conditional writes (If-None-Match: * on PUT), for the tests of two Delta writers racing
// on one table version. `make setup` builds its `weed` command into .cache/seaweedfs/.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
