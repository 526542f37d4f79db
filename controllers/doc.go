// Package controllers holds the GoofyCluster and GoofyMachine reconcilers.
package controllers
