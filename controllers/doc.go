// Package controllers holds the GoofyCluster, GoofyMachine and GoofyMachineTemplate reconcilers.
package controllers
