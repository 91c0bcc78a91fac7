#!/usr/bin/env bash
# Removes what the Docker tests made (e2e/docker), whether they passed, failed or were killed: containers
# labelled svc.e2e (with their anonymous volumes), and every container, network and volume of a compose
# project or a network whose name starts with svce2e. Nothing else is touched. No engine: nothing to do.
set -uo pipefail

docker info >/dev/null 2>&1 || exit 0
project='com.docker.compose.project'
ids() { awk '$2 ~ /^svce2e/ { print $1 }'; }

containers=$( { docker ps -aq --filter label=svc.e2e; docker ps -a --filter "label=$project" --format "{{.ID}} {{.Label \"$project\"}}" | ids; } | sort -u)
[ -z "$containers" ] || docker rm -f -v $containers >/dev/null
networks=$( { docker network ls --format '{{.ID}} {{.Name}}' | ids; docker network ls --filter "label=$project" --format "{{.ID}} {{.Label \"$project\"}}" | ids; } | sort -u)
[ -z "$networks" ] || docker network rm $networks >/dev/null
volumes=$(docker volume ls --filter "label=$project" --format "{{.Name}} {{.Label \"$project\"}}" | ids)
[ -z "$volumes" ] || docker volume rm $volumes >/dev/null
left=$(echo "$containers $networks $volumes" | wc -w)
[ "$left" -eq 0 ] || echo "docker-cleanup: removed $left leftover(s) of the Docker tests"
