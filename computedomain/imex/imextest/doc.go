// Package imextest is temporary.
package imextest
