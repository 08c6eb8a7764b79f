// Package controllers holds celaudit's reconcilers: one per kind it watches. They gather inputs from the API
// server, hand them to the pure packages under internal/ (compilation, evaluation, report building) and write
// only what changed.
package controllers
