#!/usr/bin/env bash
# deploy.sh — roll a service image to ETL workers via the bastion.
#
# Usage:
#   ./deploy.sh --env staging    --service orders-sink --tag v3.14.0-rc2
#   ./deploy.sh --env production --service orders-sink --tag v3.14.0 --hosts etl-worker-01.internal   # canary
#   ./deploy.sh --env production --service orders-sink --tag v3.14.0 --batch-size 2
#
# Requires: VPN (fh-corp) up, AWS SSO profile logged in, SSH config with ProxyJump (see notes/ops/ssh-config-tips.md).
set -euo pipefail

ENV=""; SERVICE=""; TAG=""; HOSTS=""; BATCH=1; HEALTH_TIMEOUT=120; DRY_RUN=0

die()  { echo "deploy: $*" >&2; exit 1; }
log()  { printf '%s [%s] %s\n' "$(date -u +%H:%M:%S)" "$ENV" "$*"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --env)         ENV="$2"; shift 2 ;;
    --service)     SERVICE="$2"; shift 2 ;;
    --tag)         TAG="$2"; shift 2 ;;
    --hosts)       HOSTS="$2"; shift 2 ;;
    --batch-size)  BATCH="$2"; shift 2 ;;
    --dry-run)     DRY_RUN=1; shift ;;
    -h|--help)     sed -n '2,9p' "$0"; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
done

[[ -n "$ENV" && -n "$SERVICE" && -n "$TAG" ]] || die "--env, --service and --tag are required"

case "$ENV" in
  staging)
    SUBNET_PROBE="10.2.0.10"          # bastion-stg.internal, subnet 10.2.0.0/16
    AWS_PROFILE="fh-stg"
    DEFAULT_HOSTS="etl-stg-01.internal etl-stg-02.internal etl-stg-03.internal"
    ;;
  production)
    SUBNET_PROBE="10.1.0.10"          # bastion-prd.internal, subnet 10.1.0.0/16
    AWS_PROFILE="fh-prd"
    DEFAULT_HOSTS="$(printf 'etl-worker-%02d.internal ' 1 2 3 4 5 6 7 8)"
    dow=$(TZ=Europe/Warsaw date +%u); hour=$(TZ=Europe/Warsaw date +%H)
    if [[ "$dow" -lt 2 || "$dow" -gt 4 || "$hour" -lt 10 || "$hour" -ge 15 ]]; then
      [[ "${FORCE_OUTSIDE_WINDOW:-0}" == "1" ]] || die "outside change window (Tue–Thu 10:00–15:00 Europe/Warsaw)"
      log "WARNING: deploying outside the change window (FORCE_OUTSIDE_WINDOW=1)"
    fi
    ;;
  *) die "unknown env: $ENV" ;;
esac

export AWS_PROFILE
HOSTS="${HOSTS:-$DEFAULT_HOSTS}"

# --- preflight -------------------------------------------------------------
ping -c1 -W2 "$SUBNET_PROBE" >/dev/null 2>&1 || die "cannot reach $SUBNET_PROBE — is the fh-corp VPN up?"
aws sts get-caller-identity >/dev/null 2>&1  || die "AWS SSO session expired: aws sso login --profile $AWS_PROFILE"

REGISTRY="123456789012.dkr.ecr.eu-central-1.amazonaws.com"
aws ecr describe-images --repository-name "$SERVICE" --image-ids imageTag="$TAG" >/dev/null \
  || die "image $SERVICE:$TAG not found in ECR"

# --- rollout ---------------------------------------------------------------
deploy_host() {
  local host="$1"
  log "$host: pulling $SERVICE:$TAG"
  if [[ "$DRY_RUN" == 1 ]]; then return 0; fi
  ssh -o BatchMode=yes "$host" \
    "cd /opt/$SERVICE && sed -i 's/^TAG=.*/TAG=$TAG/' .env && docker compose pull -q && docker compose up -d --remove-orphans"
  local deadline=$(( SECONDS + HEALTH_TIMEOUT ))
  until curl -fsS -m 3 "http://$host:8080/healthz" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || die "$host: not healthy after ${HEALTH_TIMEOUT}s — stopping rollout"
    sleep 3
  done
  log "$host: healthy"
}

read -r -a host_arr <<< "$HOSTS"
log "deploying $SERVICE:$TAG to ${#host_arr[@]} host(s), batch size $BATCH"
for (( i = 0; i < ${#host_arr[@]}; i += BATCH )); do
  pids=()
  for host in "${host_arr[@]:i:BATCH}"; do
    deploy_host "$host" & pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || die "batch starting at host index $i failed"; done
  # give the consumer group time to settle before the next batch (INC-2291)
  (( i + BATCH < ${#host_arr[@]} )) && { log "waiting 60s for rebalance to settle"; sleep 60; }
done

log "done: $SERVICE:$TAG on $HOSTS"
