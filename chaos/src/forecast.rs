//! Predictive injection: forecast the cluster's load from its time series
//! and strike just ahead of the predicted peak.
//!
//! The series is the GPU demand of the pods running per telemetry interval
//! over the cluster's GPU capacity. An exponential-smoothing state-space
//! model (ETS, chosen automatically by AICc among error/trend forms —
//! `augurs-ets`, after Hyndman & Khandakar's `forecast` package) is fitted
//! on the history window and forecasts the rest; the fault starts `lead_s`
//! before the predicted peak. Its intensity follows the forecast's error
//! on the last stretch of the history (a backtest): a model that has been
//! under-predicting raises it, one that has been over-predicting lowers it.

use augurs_core::{Fit, Predict};
use augurs_ets::AutoETS;
use serde::{Deserialize, Serialize};
use tessera_core::model::Arrival;
use tessera_core::model::GPU_MILLI;

/// Intensity after adjustment stays within this range.
pub const MIN_INTENSITY: f64 = 0.05;

/// The forecast behind one predictive fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// The model chosen (e.g. `ETS(A,Ad,N)`).
    pub model: String,
    /// Seconds per point.
    pub interval_s: u64,
    /// Points fitted.
    pub history_points: usize,
    /// Points forecast.
    pub horizon_points: usize,
    /// Predicted peak load (share of GPU capacity) and when, seconds from
    /// the start of the series.
    pub predicted_peak: f64,
    /// When.
    pub predicted_peak_at_s: u64,
    /// What happened: the actual peak over the horizon and when.
    pub actual_peak: f64,
    /// When.
    pub actual_peak_at_s: u64,
    /// Mean absolute percentage error of the forecast over the horizon.
    pub mape_pct: f64,
    /// Signed relative error of the backtest on the end of the history
    /// (actual − predicted) / predicted: > 0 means under-predicting.
    pub backtest_error: f64,
    /// The fault's intensity as written and as injected.
    pub intensity_asked: f64,
    /// As injected.
    pub intensity: f64,
}

/// A forecast that cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ForecastError {
    /// Not enough history or horizon.
    #[error(
        "forecasting needs at least {need} points of history and 1 of horizon; the series has {history} and {horizon}"
    )]
    TooShort {
        /// Needed.
        need: usize,
        /// History points.
        history: usize,
        /// Horizon points.
        horizon: usize,
    },
    /// The model failed.
    #[error("the load model could not be fitted: {0}")]
    Model(String),
}

/// Least history points a fit needs.
pub const MIN_HISTORY: usize = 8;

/// GPU demand of the pods running in each `interval_s` from `t0`, over
/// `total_gpus`, for `points` intervals (a pod counts in every interval it
/// overlaps).
pub fn load_series(arrivals: &[Arrival], total_gpus: u64, t0: u64, interval_s: u64, points: usize) -> Vec<f64> {
    let interval_s = interval_s.max(1);
    let mut diff = vec![0.0f64; points + 1];
    let end = t0 + interval_s * points as u64;
    for a in arrivals {
        let gpus = f64::from(a.pod.gpu_count) * f64::from(a.pod.gpu_milli.min(GPU_MILLI)) / f64::from(GPU_MILLI);
        let (from, to) = (a.at.max(t0), a.leaves_at.unwrap_or(u64::MAX).min(end));
        if gpus == 0.0 || from >= to {
            continue;
        }
        let i = ((from - t0) / interval_s) as usize;
        let j = (((to - t0).div_ceil(interval_s)) as usize).min(points);
        diff[i] += gpus;
        diff[j] -= gpus;
    }
    let cap = total_gpus.max(1) as f64;
    let mut acc = 0.0;
    diff[..points]
        .iter()
        .map(|d| {
            acc += d;
            acc / cap
        })
        .collect()
}

fn fit_predict(history: &[f64], horizon: usize) -> Result<(String, Vec<f64>), ForecastError> {
    let model = AutoETS::non_seasonal().damped(true).map_err(|e| ForecastError::Model(e.to_string()))?;
    let fitted = model.fit(history).map_err(|e| ForecastError::Model(e.to_string()))?;
    let name = format!("ETS({})", fitted.model().model_type());
    let f = fitted.predict(horizon, None).map_err(|e| ForecastError::Model(e.to_string()))?;
    Ok((name, f.point))
}

fn argmax(xs: &[f64]) -> (usize, f64) {
    xs.iter().copied().enumerate().fold((0, f64::NEG_INFINITY), |best, (i, x)| if x > best.1 { (i, x) } else { best })
}

/// Fits `series[..history]` and forecasts the next stretch of as many
/// points (or what is left of the series); `intensity` is the fault's as
/// written.
pub fn forecast(series: &[f64], history: usize, interval_s: u64, intensity: f64) -> Result<Forecast, ForecastError> {
    let horizon = series.len().saturating_sub(history).min(history);
    if history < MIN_HISTORY || horizon == 0 {
        return Err(ForecastError::TooShort { need: MIN_HISTORY, history, horizon });
    }
    let (model, predicted) = fit_predict(&series[..history], horizon)?;
    let actual = &series[history..history + horizon];
    let (pi, pv) = argmax(&predicted);
    let (ai, av) = argmax(actual);
    let mape_pct = 100.0 * actual.iter().zip(&predicted).map(|(a, p)| (a - p).abs() / a.abs().max(1e-3)).sum::<f64>()
        / horizon as f64;
    // Backtest: the last quarter of the history, forecast from the rest.
    let k = (history / 4).max(1);
    let backtest_error = match fit_predict(&series[..history - k], k) {
        Ok((_, p)) => {
            let (pa, aa) =
                (p.iter().sum::<f64>() / k as f64, series[history - k..history].iter().sum::<f64>() / k as f64);
            if pa.abs() < 1e-6 { 0.0 } else { (aa - pa) / pa }
        }
        Err(_) => 0.0,
    };
    let adjusted = (intensity * (1.0 + backtest_error)).clamp(MIN_INTENSITY, 1.0);
    let at = |i: usize| (history + i) as u64 * interval_s;
    Ok(Forecast {
        model,
        interval_s,
        history_points: history,
        horizon_points: horizon,
        predicted_peak: pv,
        predicted_peak_at_s: at(pi),
        actual_peak: av,
        actual_peak_at_s: at(ai),
        mape_pct,
        backtest_error,
        intensity_asked: intensity,
        intensity: adjusted,
    })
}

/// Where a fault lands in a run: its window (from its start: fixed or
/// predicted) and targets, with the forecast behind a predictive start.
/// `arrivals` are the run's, `t0` its first arrival.
pub fn place(
    spec: &crate::FaultSpec,
    nodes: &[tessera_core::model::Node],
    arrivals: &[Arrival],
    t0: u64,
    interval_s: u64,
    seed: u64,
) -> Result<(crate::ResolvedFault, Option<Forecast>), PlaceError> {
    match spec.start {
        crate::fault::Start::At(at) => Ok((spec.resolve(nodes, t0 + at, seed)?, None)),
        crate::fault::Start::BeforePeak { lead_s, history_s } => {
            let interval_s = interval_s.max(1);
            let end = arrivals.iter().map(|a| a.leaves_at.unwrap_or(a.at).max(a.at)).max().unwrap_or(t0);
            let points = (end.saturating_sub(t0) / interval_s) as usize + 1;
            let total_gpus: u64 = nodes.iter().map(|n| n.gpus.len() as u64).sum();
            let series = load_series(arrivals, total_gpus, t0, interval_s, points);
            let f = forecast(&series, (history_s / interval_s) as usize, interval_s, spec.intensity)?;
            let start = t0 + f.predicted_peak_at_s.saturating_sub(lead_s).max(history_s);
            let adjusted = crate::FaultSpec { intensity: f.intensity, ..spec.clone() };
            Ok((adjusted.resolve(nodes, start, seed)?, Some(f)))
        }
    }
}

/// A fault that cannot be placed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlaceError {
    /// Its targets.
    #[error(transparent)]
    Fault(#[from] crate::fault::FaultError),
    /// Its forecast.
    #[error(transparent)]
    Forecast(#[from] ForecastError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::model::Pod;

    #[test]
    fn the_load_series_counts_each_pod_in_the_intervals_it_runs() {
        let pod = |g: u32, milli: u32| Pod { gpu_count: g, gpu_milli: milli, ..Pod::default() };
        let arrivals = vec![
            Arrival { pod: pod(2, 1000), at: 0, leaves_at: Some(250) },
            Arrival { pod: pod(1, 500), at: 150, leaves_at: None },
            Arrival { pod: pod(0, 0), at: 0, leaves_at: None },
        ];
        let s = load_series(&arrivals, 10, 0, 100, 5);
        assert_eq!(s, vec![0.2, 0.25, 0.25, 0.05, 0.05]);
    }

    #[test]
    fn a_rising_load_is_forecast_to_peak_late_and_the_intensity_follows_the_backtest() {
        // A ramp with a little noise: the peak lies ahead.
        let series: Vec<f64> = (0..60).map(|i| 0.2 + 0.01 * i as f64 + 0.003 * ((i * 7919) % 5) as f64).collect();
        let f = forecast(&series, 40, 300, 0.5).unwrap();
        assert_eq!(
            (f.history_points, f.horizon_points),
            (40, 20),
            "the rest of the series, at most the history's length"
        );
        assert_eq!(forecast(&series, 20, 300, 0.5).unwrap().horizon_points, 20);
        assert!(f.predicted_peak_at_s >= 40 * 300 + 15 * 300, "a trend peaks at the end of the horizon: {f:?}");
        assert!(f.predicted_peak > 0.55 && f.predicted_peak < 0.9, "{f:?}");
        assert!(f.mape_pct < 15.0, "{f:?}");
        assert!((MIN_INTENSITY..=1.0).contains(&f.intensity));
        assert!(f.model.starts_with("ETS("), "{}", f.model);
        let e = forecast(&series[..5], 3, 300, 0.5).unwrap_err();
        assert!(e.to_string().contains("at least 8"), "{e}");
    }
}
