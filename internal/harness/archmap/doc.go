// Package archmap holds the tests that keep docs/ARCHITECTURE.md true:
// every package of the repository is on the package map and none imports
// a package of a layer the map does not let it use, and no function
// outside tests and generated code is longer than 100 lines.
package archmap
