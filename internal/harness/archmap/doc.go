// Package archmap holds the test that keeps docs/ARCHITECTURE.md's package
// map true: every package of the repository is on the map, and none
// imports a package of a layer the map does not let it use.
package archmap
