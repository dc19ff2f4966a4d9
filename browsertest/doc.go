// Package browsertest loads floodgate's dashboard in a real browser
// (Chromium, driven through the DevTools protocol by chromedp) and checks
// what it renders. It is a module of its own so that chromedp stays out of
// floodgate's go.mod; make test runs it after the main module's tests.
package browsertest
