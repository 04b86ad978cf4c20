// Package reports holds kpsim's versioned result schema and renders it:
// terminal and Markdown tables, HTML with charts, and comparisons of two
// runs.
//
// It renders from the result schema only, never from live structs of a
// running node, so any saved run can be rendered again later. It must not
// run proxiers or touch the kernel.
package reports
