#!/bin/sh
# Writes the results of an image-generation evaluation job as a textfile that dgx-pixels-exporter
# serves (see docs/workloads.md). The file is written under a temporary name and renamed into
# place, so the exporter never reads half of it.
#
# Usage: eval-job.sh TEXTFILE_DIR
# Settings come from the environment (defaults in brackets):
#   JOB_ID [eval-$(date +%s)]  COMMIT_SHA [unknown]  MODEL [sdxl-turbo]  LORA []  DATASET [pixels-16x16]
#   LPIPS  SSIM  PSNR_DB  CLIP_DISTANCE  RATING_MEAN  RATINGS   (quality results; unset ones are left out)
#   START [now]  END [now]   (Unix seconds; END= empty for a job still running)
set -eu

dir=${1:?usage: $0 TEXTFILE_DIR}
now=$(date +%s)
JOB_ID=${JOB_ID:-eval-$now}
COMMIT_SHA=${COMMIT_SHA:-unknown}
MODEL=${MODEL:-sdxl-turbo}
LORA=${LORA:-}
DATASET=${DATASET:-pixels-16x16}
START=${START:-$now}
END=${END-$now}

# Label values escape backslash, double quote and newline.
esc() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }'; }
num() { # NAME VALUE: refuses what is not a number, so a typo never produces a broken file
  case $2 in
    '' | *[!0-9eE.+-]* ) echo "$0: $1=$2 is not a number" >&2; exit 2 ;;
  esac
}

job="job_id=\"$(esc "$JOB_ID")\""
labels="model=\"$(esc "$MODEL")\",lora=\"$(esc "$LORA")\",dataset=\"$(esc "$DATASET")\""

tmp=$(mktemp "$dir/.eval-job.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
  echo "# HELP dgx_pixels_workload_job_info The job and what it ran, value 1."
  echo "# TYPE dgx_pixels_workload_job_info gauge"
  echo "dgx_pixels_workload_job_info{$job,commit_sha=\"$(esc "$COMMIT_SHA")\",$labels} 1"
  num START "$START"
  echo "# HELP dgx_pixels_workload_job_start_timestamp_seconds Unix time the job started."
  echo "# TYPE dgx_pixels_workload_job_start_timestamp_seconds gauge"
  echo "dgx_pixels_workload_job_start_timestamp_seconds{$job} $START"
  if [ -n "$END" ]; then
    num END "$END"
    echo "# HELP dgx_pixels_workload_job_end_timestamp_seconds Unix time the job ended."
    echo "# TYPE dgx_pixels_workload_job_end_timestamp_seconds gauge"
    echo "dgx_pixels_workload_job_end_timestamp_seconds{$job} $END"
  fi
  for pair in "LPIPS lpips LPIPS_of_the_evaluation_(lower_is_better)." \
              "SSIM ssim SSIM_of_the_evaluation." \
              "PSNR_DB psnr_decibels PSNR_of_the_evaluation,_dB." \
              "CLIP_DISTANCE clip_distance CLIP_distance_to_the_reference_style." \
              "RATING_MEAN human_rating_mean Mean_human_rating,_1_to_5." \
              "RATINGS human_ratings Number_of_human_ratings_behind_the_mean."; do
    set -- $pair
    eval "value=\${$1:-}"
    [ -n "$value" ] || continue
    num "$1" "$value"
    echo "# HELP dgx_pixels_quality_$2 $(printf '%s' "$3" | tr _ ' ')"
    echo "# TYPE dgx_pixels_quality_$2 gauge"
    echo "dgx_pixels_quality_$2{$labels} $value"
  done
} >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$dir/eval-$(printf '%s' "$JOB_ID" | tr -c 'A-Za-z0-9_.-' '_').prom"
trap - EXIT
