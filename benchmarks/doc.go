// Package benchmarks compares floodgate's memory store with other Go rate
// limiters on the same workloads. It is a module of its own, so that the
// peers it depends on never reach floodgate's go.mod; this package's
// benchmarks are all in its _test.go files. The command redisload (with
// the helper package redisserver) compares floodgate's Redis store with
// Redis-backed limiters. See README.md.
package benchmarks
