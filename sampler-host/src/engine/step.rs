//! [`Engine::step`]: one scheduler step (admission, the batch's requests,
//! the model's logits, one sampler call, and the updates it sends to every rank).

use super::*;

impl Engine {
    /// Runs one step. A driver asks `model` for logits; a follower never does
    /// (pass [`NoModel`]) and returns an empty report.
    ///
    /// Errors: the model's logits have the wrong shape, the sampler rejects
    /// the batch's shape, or a collective fails. A bad request only fails itself.
    pub fn step(&mut self, model: &mut dyn LogitsSource) -> Result<StepReport, EngineError> {
        self.admit();
        let step = self.step;
        self.step += 1;
        let mut report = StepReport { step, ..Default::default() };
        if self.running.is_empty() {
            report.pool_bytes = self.pool.bytes();
            return Ok(report);
        }
        let driver = self.cfg.role == Role::Driver;
        let v = self.sampler.config().vocab_size as usize;
        let nextn = self.cfg.nextn;

        // 2. Schedule.
        let phases: Vec<Phase> = self
            .running
            .iter()
            .map(|s| {
                let p = s.prompt.len();
                if s.prefilled < p {
                    let chunk = if self.cfg.prefill_chunk == 0 { p } else { self.cfg.prefill_chunk };
                    let len = chunk.min(p - s.prefilled);
                    Phase::Prefill { start: s.prefilled, len, last: s.prefilled + len == p }
                } else {
                    Phase::Decode { drafts: s.drafts.len() }
                }
            })
            .collect();

        // 3. Prompt logprobs of this step's prefill chunks.
        let mut prompt_counts = vec![0usize; self.running.len()];
        let mut prompt_errors: Vec<Option<RequestError>> = vec![None; self.running.len()];
        let job_of: Vec<usize> = (0..self.running.len())
            .filter(|&i| self.running[i].params.prompt_logprobs && matches!(phases[i], Phase::Prefill { .. }))
            .collect();
        let jobs: Vec<PromptJob<'_>> = job_of
            .iter()
            .map(|&i| {
                let Phase::Prefill { start, len, .. } = phases[i] else { unreachable!() };
                PromptJob { params: self.running[i].params.clone(), prompt: &self.running[i].prompt, start, len }
            })
            .collect();
        let any_prompt_rows = jobs.iter().any(|j| !j.positions().is_empty());
        if any_prompt_rows {
            if driver {
                let ids: Vec<u64> = job_of.iter().map(|&i| self.running[i].id).collect();
                let inputs: Vec<&[i32]> = jobs.iter().map(|j| j.prompt).collect();
                let (res, stats) =
                    compute_prompt_logprobs(&mut self.sampler, &jobs, self.cfg.max_prompt_rows, |rows| {
                        let q: Vec<RowQuery> = rows
                            .iter()
                            .map(|&(j, p)| RowQuery {
                                request: ids[j],
                                role: RowRole::Prompt,
                                input: inputs[j][p],
                                predicts: p as u64 + 1,
                            })
                            .collect();
                        let l = model.target_logits(&q);
                        check_len("prompt", &l, q.len(), v)?;
                        Ok(l)
                    })?;
                report.prompt_stats = stats;
                drop(jobs);
                for (r, &i) in res.into_iter().zip(&job_of) {
                    match r {
                        Ok(lp) => {
                            prompt_counts[i] = lp.len();
                            self.running[i].prompt_logprobs.extend(lp);
                        }
                        Err(e) => prompt_errors[i] = Some(e),
                    }
                }
            }
            // The reference's follower takes part in the prompt-logprobs gather.
            self.collective.barrier()?;
        }

        // 4-5. Target sampling and draft draws (driver).
        let mut updates: Vec<Option<Update>> = vec![None; self.running.len()];
        let mut teacher = vec![false; self.running.len()];
        let mut mask_bytes = 0;
        if driver {
            let main: Vec<usize> = (0..self.running.len())
                .filter(|&i| matches!(phases[i], Phase::Decode { .. } | Phase::Prefill { last: true, .. }))
                .collect();
            // Grammar masks (built on the host while the device would compute logits).
            let mut masks = StepMasks::new(nextn, main.len(), v);
            let any_grammar = main.iter().any(|&i| self.running[i].grammar.is_some());
            for (b, &i) in main.iter().enumerate() {
                let s = &mut self.running[i];
                let drafts = s.drafts.clone();
                if let Some(g) = s.grammar.as_deref_mut() {
                    masks.fill(b, g, &drafts);
                }
            }
            if any_grammar {
                mask_bytes = masks.bytes();
            }
            let mut reqs = Vec::with_capacity(main.len());
            let mut queries = Vec::new();
            for (b, &i) in main.iter().enumerate() {
                let s = &self.running[i];
                let out_len = s.output.len();
                let (mut req, seqlen_q) = match phases[i] {
                    Phase::Prefill { len, .. } => {
                        queries.push(RowQuery {
                            request: s.id,
                            role: RowRole::Target,
                            input: s.last_token(),
                            predicts: s.prompt.len() as u64,
                        });
                        (Request::prefill(s.params.for_sampler(), s.prompt.len() as u64), len)
                    }
                    _ => {
                        let k = s.drafts.len();
                        let l = s.len();
                        for j in 0..=k {
                            let input = if j == 0 { s.last_token() } else { s.drafts[j - 1] };
                            queries.push(RowQuery {
                                request: s.id,
                                role: RowRole::Target,
                                input,
                                predicts: l + j as u64,
                            });
                        }
                        let dists = (0..k).map(|j| self.pool.read(s.slot, j)).collect();
                        (
                            Request::decode(
                                s.params.for_sampler(),
                                l + k as u64,
                                k as u64 + 1,
                                s.drafts.clone(),
                                dists,
                            ),
                            k + 1,
                        )
                    }
                };
                req.golden = golden::step_golden(&s.params.golden_token_ids, out_len, nextn, seqlen_q, req.rows());
                teacher[i] = !req.golden.is_empty();
                req.masks = masks.request(b, req.rows());
                reqs.push(req);
            }
            let logits = model.target_logits(&queries);
            check_len("target", &logits, queries.len(), v)?;
            let out = self.sampler.sample(&logits, &reqs)?;

            // Apply the step's results (driver side), then draft draws.
            let mut draft_for: Vec<(usize, RequestKind)> = Vec::new();
            for (b, &i) in main.iter().enumerate() {
                let s = &mut self.running[i];
                let r = &out.requests[b];
                let mut u = Update { ok: true, accepted: r.accepted, ..Default::default() };
                let status = if let Some(e) = masks.error(b) {
                    Err(e)
                } else if let Some(e) = prompt_errors[i].take() {
                    Err(e)
                } else {
                    r.status.clone()
                };
                if let Err(e) = status {
                    s.status = Err(e);
                    u.ok = false;
                    u.accepted = 0;
                    u.finished = true;
                    updates[i] = Some(u);
                    continue;
                }
                let room = s.max_tokens - s.output.len();
                for (&t, &lp) in r.emitted.iter().zip(&r.emitted_logprobs).take(room) {
                    u.emitted.push(t);
                    u.logprobs.push(lp);
                    if Some(t) == s.eos {
                        break;
                    }
                }
                // The grammar follows the emitted tokens (a golden token it forbids fails the request).
                if let Some(g) = s.grammar.as_deref_mut() {
                    let mut err = None;
                    for &t in &u.emitted {
                        if let Err(e) = g.accept(t) {
                            err = Some(e);
                            break;
                        }
                    }
                    if let Some(e) = err {
                        s.status = Err(RequestError::Matcher(e));
                        updates[i] = Some(Update { ok: false, finished: true, ..Default::default() });
                        continue;
                    }
                }
                let new_len = s.output.len() + u.emitted.len();
                u.finished = new_len >= s.max_tokens
                    || u.emitted.last().is_some_and(|&t| Some(t) == s.eos)
                    || s.grammar.as_ref().is_some_and(|g| g.is_finished());
                let k_next = nextn.min(s.max_tokens.saturating_sub(new_len + 1));
                if !u.finished && k_next > 0 {
                    let kind = match phases[i] {
                        Phase::Prefill { .. } => RequestKind::Draft {
                            seqlen_k: s.prompt.len() as u64,
                            seqlen_q: 1,
                            last_valid_offset: 0,
                            rows: k_next as u32,
                        },
                        _ => {
                            let k = s.drafts.len() as u64;
                            RequestKind::Draft {
                                seqlen_k: s.len() + k,
                                seqlen_q: k + 1,
                                last_valid_offset: u.accepted as u64,
                                rows: k_next as u32,
                            }
                        }
                    };
                    draft_for.push((i, kind));
                }
                updates[i] = Some(u);
            }
            if !draft_for.is_empty() {
                let mut dreqs = Vec::with_capacity(draft_for.len());
                let mut dq = Vec::new();
                for (i, kind) in &draft_for {
                    let s = &self.running[*i];
                    let u = updates[*i].as_ref().unwrap();
                    let base = s.len() + u.emitted.len() as u64;
                    let RequestKind::Draft { rows, .. } = kind else { unreachable!() };
                    for d in 0..*rows as u64 {
                        let input = if d == 0 { *u.emitted.last().unwrap() } else { -1 };
                        dq.push(RowQuery { request: s.id, role: RowRole::Draft, input, predicts: base + d });
                    }
                    dreqs.push(Request {
                        params: s.params.for_sampler(),
                        kind: kind.clone(),
                        golden: Vec::new(),
                        masks: None,
                    });
                }
                let dlogits = model.draft_logits(&dq);
                check_len("draft", &dlogits, dq.len(), v)?;
                let all_rows: Vec<usize> = (0..dq.len()).collect();
                let (dout, proc_rows) = self.sampler.sample_with_processed(&dlogits, &dreqs, &all_rows)?;
                let mut row = 0;
                for (b, (i, _)) in draft_for.iter().enumerate() {
                    let rows = dreqs[b].rows();
                    let r = &dout.requests[b];
                    if r.status.is_ok() && r.emitted.len() == rows {
                        let slot = self.running[*i].slot;
                        for d in 0..rows {
                            let (ids, lps) = proc_rows.row(row + d)?;
                            self.pool.write(slot, d, ids, lps)?;
                        }
                        updates[*i].as_mut().unwrap().drafts = r.emitted.clone();
                    }
                    row += rows;
                }
            }
        }

        // 6. The driver broadcasts the step; every rank applies it.
        let mut buf = if driver { encode(&updates) } else { Vec::new() };
        self.collective.broadcast_i32(&mut buf, 0)?;
        if !driver {
            updates = decode(&buf)?;
            if updates.len() != self.running.len() {
                return Err(EngineError::Protocol(format!(
                    "driver runs {} requests, this follower {}",
                    updates.len(),
                    self.running.len()
                )));
            }
        }
        report.mask_bytes = mask_bytes;
        let mut keep = Vec::with_capacity(self.running.len());
        for (i, mut s) in std::mem::take(&mut self.running).into_iter().enumerate() {
            if let Phase::Prefill { len, .. } = phases[i] {
                s.prefilled += len;
            }
            let u = updates[i].take();
            let mut rs = RequestStep {
                id: s.id,
                phase: phases[i].clone(),
                accepted: 0,
                emitted: Vec::new(),
                teacher_forced: teacher[i],
                prompt_logprobs: prompt_counts[i],
                new_drafts: 0,
                status: Ok(()),
                finished: false,
            };
            if let Some(u) = u {
                if !u.ok && s.status.is_ok() {
                    s.status = Err(RequestError::Field {
                        field: "status",
                        msg: "the request failed on the driver rank".into(),
                    });
                }
                if let Phase::Decode { drafts } = phases[i] {
                    s.drafted += drafts as u64;
                    s.accepted += u.accepted as u64;
                }
                s.output.extend(&u.emitted);
                s.output_logprobs.extend(&u.logprobs);
                s.drafts = u.drafts.clone();
                rs.accepted = u.accepted;
                rs.emitted = u.emitted;
                rs.new_drafts = u.drafts.len();
                rs.finished = u.finished;
                rs.status = s.status.clone();
            }
            if driver {
                report.requests.push(rs.clone());
            }
            if rs.finished {
                self.pool.release(s.slot);
                self.finished.push(Finished {
                    id: s.id,
                    output: s.output,
                    output_logprobs: s.output_logprobs,
                    prompt_logprobs: s.prompt_logprobs,
                    status: s.status,
                    accepted: s.accepted,
                    drafted: s.drafted,
                    slot: s.slot,
                });
            } else {
                keep.push(s);
            }
        }
        self.running = keep;
        report.pool_bytes = self.pool.bytes();
        report.slots_in_use = self.pool.slots_in_use();
        Ok(report)
    }
}
